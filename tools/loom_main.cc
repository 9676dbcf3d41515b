// The `loom` command, a dispatcher. Subcommands:
//   loom info         version, build type, backends, BLAS library and thread count
//   loom ops          every registered op with its inputs, attributes and differentiability
//   loom train MODEL  train a model of the zoo, e.g. LeNet-5 on Fashion-MNIST (tools/train_cmd.h)
//   loom eval MODEL   evaluate a model (optionally a checkpoint) on its test set
//                     (tools/train_cmd.h)
//   loom summary show DIR  list TensorBoard event files (tools/train_cmd.h)
//   loom export MODEL / loom run FILE.mindir / loom mindir show FILE  MindIR (tools/mindir_cmd.h)
//   loom ckpt show FILE  a checkpoint's entries, checksums and training state (tools/ckpt_cmd.h)
//   loom compare A B  two dumps tensor by tensor, the first failing node (tools/compare_cmd.h)
//   loom debug DIR --watch SPEC  MindInsight's watch conditions over a dump (tools/debug_cmd.h)
//   loom profile show DIR  a --profile folder: step breakdown, op types, top nodes, slowest rank
//                     (tools/profile_cmd.h)
#include <cblas.h>


#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/conv_dnnl.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/simd.h"
#include "backends/backend.h"
#include "backends/gpu/cuda_backend.h"
#include "core/ir/error.h"
#include "core/ir/printer.h"
#include "ops/op.h"
#include "tools/ckpt_cmd.h"
#include "tools/compare_cmd.h"
#include "tools/debug_cmd.h"
#include "tools/mindir_cmd.h"
#include "tools/profile_cmd.h"
#include "tools/train_cmd.h"

namespace {

constexpr char kUsage[] =
    "usage: loom <command> [options]\n"
    "commands:\n"
    "  info         print the version, build, backends, BLAS library and threads\n"
    "  ops          list every op with its inputs, attributes and differentiability\n"
    "  train MODEL  train a model, e.g. lenet: LeNet-5 on Fashion-MNIST (loom train --help)\n"
    "  eval MODEL   evaluate a model or a checkpoint on its test set (loom eval --help)\n"
    "  summary show DIR  list the TensorBoard event files of a --summary-dir\n"
    "  export MODEL --output FILE.mindir [--ckpt PATH]  export a model as MindIR\n"
    "  run FILE.mindir --input X.npy [--output Y.npy]  run a MindIR model\n"
    "  mindir show FILE  list a MindIR file's inputs, outputs, ops and parameters\n"
    "  ckpt show FILE  list a checkpoint's entries (dtype, shape, CRC-32) and training state\n"
    "  compare A B  compare two dumps tensor by tensor; name the first failing node\n"
    "  debug DIR --watch SPEC  check MindInsight's watch conditions on a dump (loom debug -h)\n"
    "  profile show DIR  a --profile folder's step breakdown, op types, top nodes, slowest rank\n"
    "exit status: 0 done; 2 a usage error (an unknown command or option, a bad value); 1 a\n"
    "run-time error (a missing or malformed file, a failed run). loom compare and loom profile\n"
    "show: 2 also for bad input, and compare 1 when a tensor fails (as diff does).\n";

int info() {
  std::cout << "loom " << LOOM_VERSION << "\n";
  std::cout << "build type: " << LOOM_BUILD_TYPE << "\n";
  std::cout << "compiler: " << __VERSION__ << "\n";
  std::cout << "backends: " << loom::backend::cpu_backend().describe();
  if (loom::backend::Backend* cuda = loom::backend::find_backend(loom::Device::kCUDA)) {
    std::cout << "; " << cuda->describe();
  }
  std::cout << "\n";
  if (!loom::backend::find_backend(loom::Device::kCUDA))
    std::cout << "CUDA: none: " << loom::backend::cuda_unavailable_reason() << "\n";
  // default_gemm() makes the one-time switch of OpenBLAS to its AVX-512 kernels where the
  // library misdetects this CPU, so the kernel printed below is the one loom uses.
  const auto gemm = loom::backend::cpu::default_gemm();
  std::cout << "GEMM: " << loom::backend::cpu::gemm_name(gemm) << " (LOOM_GEMM=openblas|eigen)\n";
  std::cout << "BLAS: " << openblas_get_config() << "\n";
  std::cout << "BLAS kernel: " << openblas_get_corename() << "\n";
  std::cout << "BLAS threads: " << openblas_get_num_threads() << "\n";
  const std::string dnnl = loom::backend::cpu::dnnl_version_string();
  const std::string winograd = loom::backend::cpu::dnnl_winograd_available()
                                   ? "Winograd for 3x3 stride 1 (LOOM_WINOGRAD=0 off)"
                                   : "no Winograd on this processor (oneDNN's needs AVX-512)";
  std::cout << "convolutions: "
            << (dnnl.empty() ? std::string("loom's kernels (built without oneDNN)")
                             : "oneDNN " + dnnl + ", " + winograd +
                                   "; loom's kernels in deterministic mode")
            << " (LOOM_CONV=dnnl|loom|im2col)\n";
  // The vector instructions loom's own kernels were compiled for (-march=native).
  std::cout << "vector kernels: "
            << (loom::backend::cpu::simd::kLanes == 16 ? "AVX-512 (16 Float32 lanes)"
                : loom::backend::cpu::simd::kLanes == 8
                    ? "AVX2 with FMA (8 Float32 lanes)"
                    : "none (plain loops: built without AVX2 or AVX-512)")
            << "\n";
  // Mixed precision (--amp-level): which low-precision instructions the processor has, and how
  // the CPU backend computes Float16 / BFloat16 ops today.
  std::string flags;
  if (std::ifstream cpuinfo("/proc/cpuinfo"); cpuinfo) {
    for (std::string line; std::getline(cpuinfo, line);) {
      if (line.rfind("flags", 0) == 0) {
        flags = " " + line.substr(line.find(':') + 1) + " ";
        break;
      }
    }
  }
  auto has = [&](const char* f) { return flags.find(" " + std::string(f) + " ") != std::string::npos; };
  const bool mm16 = loom::backend::cpu_backend().find_kernel("MatMul", loom::DType::kBFloat16);
  std::cout << "low precision: processor " << (has("avx512_bf16") ? "has" : "without")
            << " avx512_bf16, " << (has("amx_bf16") ? "has" : "without") << " amx_bf16, "
            << (has("avx512_fp16") ? "has" : "without") << " avx512_fp16; Float16/BFloat16 "
            << (mm16 ? "kernels" : "ops compute on Float32 kernels, rounded after each op")
            << "\n";
  if (loom::backend::Backend* cuda = loom::backend::find_backend(loom::Device::kCUDA)) {
    // The CUDA backend's 16-bit kernels (backends/gpu/half.cuh), unless LOOM_CUDA_HALF_KERNELS=0.
    const bool half = cuda->find_kernel("Conv2D", loom::DType::kBFloat16) != nullptr;
    std::cout << "CUDA low precision: "
              << (half ? "Float16/BFloat16 convolutions and products on the tensor cores, the "
                         "elementwise ops between them in 16 bits (LOOM_CUDA_HALF_KERNELS=0 off)"
                       : "Float16/BFloat16 ops on Float32 kernels, rounded after each op "
                         "(LOOM_CUDA_HALF_KERNELS=0)")
              << "\n";
  }
  std::cout << "hardware threads: " << std::thread::hardware_concurrency() << "\n";
  return 0;
}

int list_ops() {
  const auto& kernels = loom::backend::cpu_backend().kernels();
  for (const loom::ops::OpDef* op : loom::ops::Registry::global().all()) {
    std::cout << op->name << "  inputs: "
              << (op->num_inputs >= 0 ? std::to_string(op->num_inputs)
                                      : std::to_string(op->min_inputs) + "+");
    if (op->num_outputs > 1) std::cout << "  outputs: " << op->num_outputs;
    std::cout << "  " << (op->bprop ? "differentiable" : "not differentiable");
    std::string cpu;
    for (loom::DType d : kernels.dtypes(op->name)) {
      cpu += (cpu.empty() ? "" : ",") + std::string(loom::dtype_name(d));
    }
    if (!cpu.empty()) std::cout << "  CPU: " << cpu;
    std::cout << "\n    " << op->summary << "\n";
    for (const loom::ops::AttrSpec& a : op->attrs) {
      std::cout << "    " << a.name;
      if (a.default_value) std::cout << " = " << loom::ir::print_value(*a.default_value);
      std::cout << "\n";
    }
  }
  return 0;
}

int run(const std::vector<std::string>& args) {
  if (args.empty()) {  // a usage error: the usage on stderr
    std::cerr << kUsage;
    return 2;
  }
  if (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << kUsage;
    return 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if ((args[0] == "info" || args[0] == "ops") && !rest.empty()) {
    std::cerr << "loom " << args[0] << ": expected no arguments, got '" << rest[0] << "'\n";
    return 2;
  }
  if (args[0] == "info") return info();
  if (args[0] == "ops") return list_ops();
  if (args[0] == "train") return loom::tools::train_command(rest);
  if (args[0] == "eval") return loom::tools::eval_command(rest);
  if (args[0] == "summary") return loom::tools::summary_command(rest);
  if (args[0] == "export") return loom::tools::export_command(rest);
  if (args[0] == "run") return loom::tools::run_mindir_command(rest);
  if (args[0] == "mindir") return loom::tools::mindir_command(rest);
  if (args[0] == "ckpt") return loom::tools::ckpt_command(rest);
  if (args[0] == "compare") return loom::tools::compare_command(rest);
  if (args[0] == "debug") return loom::tools::debug_command(rest);
  if (args[0] == "profile") return loom::tools::profile_command(rest);
  // A usage error, as an unknown option of a command is.
  std::cerr << "loom: expected a command (info, ops, train, eval, summary, export, run, mindir, "
               "ckpt, compare, debug, profile), got '" << args[0] << "'\n(see `loom --help`)\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const loom::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
