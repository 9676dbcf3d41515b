// `loom export`, `loom run` and `loom mindir show` (tools/mindir_cmd.h).
#include "tools/mindir_cmd.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <iostream>
#include <map>
#include <sstream>

#include "backends/backend.h"
#include "checkpoint/checkpoint.h"
#include "core/ir/error.h"
#include "data/npy.h"
#include "debug/dump.h"
#include "debug/numerics.h"
#include "debug/profiler.h"
#include "mindir/mindir.h"
#include "onnx/onnx.h"
#include "models/zoo.h"
#include "nn/context.h"
#include "runtime/compiled_function.h"
#include "tools/parse_count.h"

namespace loom::tools {

namespace {

constexpr char kExportHelp[] =
    "usage: loom export <model> --output FILE.mindir|FILE.onnx [--format mindir|onnx]\n"
    "                   [--ckpt PATH] [--dataset NAME] [--batch N] [--save-graphs DIR]\n"
    "  exports the model zoo's network (weights from --ckpt, else its initial values) as MindIR,\n"
    "  or as ONNX (opset 17, any batch size; --format onnx, or an --output ending in .onnx);\n"
    "  --save-graphs DIR dumps the traced graph and every pass of the export pipeline into\n"
    "  DIR/export/ (NN_<stage>.ir and .dot)\n";
constexpr char kRunHelp[] =
    "usage: loom run MODEL.mindir|MODEL.onnx --input X.npy [--output Y.npy] [--device CPU|GPU]\n"
    "                [--dump D] [--dump-config F] [--dump-max-bytes N] [--check-numerics]\n"
    "                [--repeat N [--warmup W]] [--profile D]\n"
    "  runs a MindIR model (loom's or MindSpore's) or an ONNX model (a name ending in .onnx:\n"
    "  PyTorch's torch.onnx.export, loom's export) on a .npy array; --device runs it there\n"
    "  (MindSpore's device_target, default CPU: the weights and the input are copied to the\n"
    "  device, the result back); --dump D writes every launch's tensors in MindSpore's dump\n"
    "  layout (net_name: the file's name), --dump-config F reads MindSpore's dump\n"
    "  configuration, --check-numerics stops at the first NaN or Inf (`loom train --help`,\n"
    "  docs/debugging.md); --repeat N then calls the model N more times on the same input\n"
    "  (after W untimed calls, default 10) and prints the latency of one call: the compiled\n"
    "  model with its input in host memory, the result on the device (synchronized);\n"
    "  --profile D records the call (with --repeat: the timed calls, whose latency then\n"
    "  includes the profiler's) into D as `loom train --profile` does (`loom profile show D`)\n";
constexpr char kMindirHelp[] =
    "usage: loom mindir show FILE.mindir|FILE.onnx\n"
    "  lists the inputs, outputs, ops with counts and parameters with shapes\n";

int usage(const std::string& message, const char* help) {
  std::cerr << message << "\n" << help;
  return 2;
}

// Parses "--flag VALUE" pairs and positionals; returns false (after printing) on a bad flag.
bool parse(const std::vector<std::string>& args, const std::vector<std::string>& flags,
           std::map<std::string, std::string>& out, std::vector<std::string>& positional,
           const std::string& cmd, const std::vector<std::string>& switches = {}) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (std::find(switches.begin(), switches.end(), a) != switches.end()) {
      out[a] = "";
      continue;
    }
    if (a.rfind("--", 0) == 0) {
      if (std::find(flags.begin(), flags.end(), a) == flags.end()) {
        std::cerr << "loom " << cmd << ": unknown option '" << a << "'\n";
        return false;
      }
      if (i + 1 >= args.size()) {
        std::cerr << "loom " << cmd << ": expected a value after " << a << "\n";
        return false;
      }
      out[a] = args[++i];
    } else {
      positional.push_back(a);
    }
  }
  return true;
}

std::string shape_text(const Shape& s) { return shape_to_string(s); }

// cell(x) for `loom run`'s one input. A model traced for one shape runs on others where its ops
// allow (another batch size); where they do not, the error names the file, its shape and the
// model's declared input before the op's own message.
Tensor run_input(mindir::GraphCell& cell, const std::string& model, const Tensor& x,
                 const std::string& file) {
  if (cell.inputs().size() != 1) {
    throw ValueError(model + " has " + std::to_string(cell.inputs().size()) +
                     " inputs; loom run feeds exactly one (--input)");
  }
  const mindir::TensorInfo& in = cell.inputs()[0];
  try {
    return cell(x);
  } catch (const Error& e) {
    if (x.dtype() == in.dtype && x.shape() == in.shape) throw;
    throw ValueError(file + " holds " + std::string(dtype_name(x.dtype())) + " " +
                     shape_text(x.shape()) + ", but " + model + "'s input '" + in.name + "' is " +
                     std::string(dtype_name(in.dtype)) + " " + shape_text(in.shape) + ": " +
                     e.what());
  }
}

// Seconds per call of `cell` on `x`, `repeat` calls after `warmup` untimed ones, each call
// synchronized with the device (what a caller waiting for its answer sees); `profiler` (or null)
// records each timed call as one step.
std::vector<double> time_calls(mindir::GraphCell& cell, const Tensor& x, backend::Backend& backend,
                               std::int64_t repeat, std::int64_t warmup,
                               debug::Profiler* profiler) {
  for (std::int64_t i = 0; i < warmup; ++i) cell(x);
  backend.synchronize();
  std::vector<double> s(static_cast<std::size_t>(repeat));
  for (double& t : s) {
    if (profiler) profiler->start();
    const auto t0 = std::chrono::steady_clock::now();
    cell(x);
    backend.synchronize();
    t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (profiler) profiler->stop();
  }
  return s;
}

void print_latency(std::vector<double> s) {
  std::sort(s.begin(), s.end());
  const auto at = [&](double q) {
    return s[std::min(s.size() - 1, static_cast<std::size_t>(q * static_cast<double>(s.size())))];
  };
  double sum = 0;
  for (double t : s) sum += t;
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  o << "latency: " << s.size() << " runs, median " << at(0.5) * 1e6 << " us, min " << s[0] * 1e6
    << " us, p90 " << at(0.9) * 1e6 << " us, mean " << sum / static_cast<double>(s.size()) * 1e6
    << " us\n";
  std::cout << o.str();
}

}  // namespace

int export_command(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "-h" || args[0] == "--help")) {
    std::cout << kExportHelp;
    return 0;
  }
  std::map<std::string, std::string> f;
  std::vector<std::string> pos;
  if (!parse(args, {"--ckpt", "--output", "--dataset", "--batch", "--save-graphs", "--format"}, f,
             pos, "export")) {
    std::cerr << kExportHelp;
    return 2;
  }
  if (pos.size() != 1) return usage("loom export: expected one model name", kExportHelp);
  if (!f.count("--output")) return usage("loom export: expected --output FILE.mindir", kExportHelp);
  const std::string& output = f["--output"];
  const bool onnx_suffix = output.size() >= 5 && output.compare(output.size() - 5, 5, ".onnx") == 0;
  const std::string format = f.count("--format") ? f["--format"] : onnx_suffix ? "onnx" : "mindir";
  if (format != "mindir" && format != "onnx") {
    return usage("loom export: expected --format mindir or onnx, got '" + format + "'",
                 kExportHelp);
  }
  std::int64_t batch = 1;
  if (f.count("--batch")) {
    try {
      batch = std::stoll(f["--batch"]);
    } catch (...) {
      batch = 0;
    }
    if (batch <= 0)
      return usage("loom export: expected --batch to be a positive integer", kExportHelp);
  }
  try {
    const models::Recipe& r = models::recipe(pos[0]);
    std::string dataset = f.count("--dataset") ? f["--dataset"] : r.defaults.dataset;
    if (dataset.empty() && !r.datasets.empty()) dataset = r.datasets[0];
    models::NetworkOptions no;
    no.dataset = dataset;
    std::shared_ptr<nn::Cell> net = r.make_network(no);
    if (f.count("--ckpt")) {
      const checkpoint::Checkpoint ck = checkpoint::load_checkpoint(f["--ckpt"]);
      auto [not_loaded, unused] = checkpoint::load_param_into_net(*net, ck.tensors);
      if (!not_loaded.empty()) {
        throw ValueError("loom export: expected every parameter in " + f["--ckpt"] +
                         ", got none for '" + not_loaded[0] + "'");
      }
    }
    Shape shape = r.input_shape(dataset);
    shape.insert(shape.begin(), batch);
    if (format == "onnx") {
      if (f.count("--save-graphs")) {
        return usage("loom export: --save-graphs is for MindIR export", kExportHelp);
      }
      onnx::export_onnx(*net, {ir::Abstract::tensor(DType::kFloat32, shape)}, output);
      shape[0] = -1;  // any batch size
    } else {
      mindir::ExportOptions options;
      if (f.count("--save-graphs")) options.save_graphs_dir = f["--save-graphs"];
      mindir::export_mindir(*net, {ir::Abstract::tensor(DType::kFloat32, shape)}, output,
                            options);
    }
    std::cout << "exported " << pos[0] << " (input Float32 " << shape_text(shape) << ") to "
              << output << "\n";
    return 0;
  } catch (const Error& e) {
    std::cerr << "loom export: " << e.what() << "\n";
    return 1;
  }
}

// A MindIR or (a name ending in .onnx) an ONNX model.
mindir::GraphCell load_model(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  return ext == ".onnx" || ext == ".ONNX" ? onnx::load_onnx(path) : mindir::load_mindir(path);
}

int run_mindir_command(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "-h" || args[0] == "--help")) {
    std::cout << kRunHelp;
    return 0;
  }
  std::map<std::string, std::string> f;
  std::vector<std::string> pos;
  if (!parse(args, {"--input", "--output", "--device", "--dump", "--dump-config",
                    "--dump-max-bytes", "--repeat", "--warmup", "--profile"},
             f, pos, "run", {"--check-numerics"})) {
    std::cerr << kRunHelp;
    return 2;
  }
  if (pos.size() != 1) return usage("loom run: expected one MODEL.mindir or MODEL.onnx", kRunHelp);
  if (!f.count("--input")) return usage("loom run: expected --input X.npy", kRunHelp);
  std::int64_t repeat = 0, warmup = 10;
  if (f.count("--repeat")) {
    const std::optional<std::int64_t> n = parse_count(f["--repeat"]);
    if (!n || *n < 1) {
      return usage("loom run: --repeat: expected a positive integer, got '" + f["--repeat"] + "'",
                   kRunHelp);
    }
    repeat = *n;
  }
  if (f.count("--warmup")) {
    const std::optional<std::int64_t> n = parse_count(f["--warmup"]);
    if (!n) {
      return usage("loom run: --warmup: expected a non-negative integer, got '" +
                       f["--warmup"] + "'",
                   kRunHelp);
    }
    if (!repeat) return usage("loom run: --warmup needs --repeat", kRunHelp);
    warmup = *n;
  }
  Device device = Device::kCPU;
  if (f.count("--device")) {
    try {
      device = nn::device_from_target(f["--device"].c_str());
    } catch (const ValueError&) {
      return usage("loom run: --device: expected CPU or GPU, got '" + f["--device"] + "'",
                   kRunHelp);
    }
  }
  try {
    std::optional<debug::DumpConfig> dump;
    std::uint64_t max_bytes = 0;
    try {
      if (f.count("--dump-max-bytes")) {
        max_bytes = debug::parse_byte_count(f["--dump-max-bytes"], "--dump-max-bytes");
      }
      if (f.count("--dump-config")) dump = debug::load_dump_config(f["--dump-config"]);
    } catch (const ValueError& e) {
      return usage(std::string("loom run: ") + e.what(), kRunHelp);
    }
    const std::string net = std::filesystem::path(pos[0]).stem().string();
    if (f.count("--dump")) {
      if (dump) {
        dump->path = f["--dump"];
      } else {
        dump = debug::dump_config_for_dir(f["--dump"], net);
      }
    }
    if (dump && max_bytes > 0) dump->max_bytes = max_bytes;
    // The device first: a device this build or machine lacks is said before the model loads.
    backend::Backend& backend = backend::get_backend(device);
    mindir::GraphCell cell = load_model(pos[0]);
    cell.to_device(backend);
    if (dump) cell.compiled_function().add_observer(std::make_shared<debug::Dumper>(*dump));
    if (f.count("--check-numerics")) {
      cell.compiled_function().add_observer(std::make_shared<debug::NumericsChecker>(
          debug::NumericsOptions{.dump_dir = dump ? dump->path : "numerics_dump",
                                 .net_name = net}));
    }
    std::shared_ptr<debug::Profiler> profiler;
    if (f.count("--profile")) {
      profiler = std::make_shared<debug::Profiler>(debug::ProfilerOptions{
          .output_path = f["--profile"], .model = net, .device = device});
      cell.compiled_function().add_observer(profiler);
    }
    const Tensor x = data::load_npy(f["--input"]);
    if (profiler && !repeat) profiler->start();
    const Tensor y = backend::to_host(run_input(cell, pos[0], x, f["--input"]));
    if (profiler && !repeat) profiler->stop();
    if (dump) std::cout << "dump: " << dump->path << "\n";
    if (f.count("--output")) {
      data::save_npy(f["--output"], y);
      std::cout << "wrote " << dtype_name(y.dtype()) << " " << shape_text(y.shape()) << " to "
                << f["--output"] << "\n";
    } else {
      std::cout << dtype_name(y.dtype()) << " " << shape_text(y.shape()) << "\n";
      const std::int64_t n = std::min<std::int64_t>(y.numel(), 10);
      for (std::int64_t i = 0; i < n; ++i) std::cout << (i ? " " : "") << y.get(i);
      std::cout << (y.numel() > n ? " ..." : "") << "\n";
    }
    if (repeat > 0) print_latency(time_calls(cell, x, backend, repeat, warmup, profiler.get()));
    if (profiler) {
      profiler->analyse();
      std::cout << "profile: " << f["--profile"] << " (`loom profile show " << f["--profile"]
                << "`)\n";
    }
    return 0;
  } catch (const Error& e) {
    std::cerr << "loom run: " << e.what() << "\n";
    return 1;
  }
}

int mindir_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::cout << kMindirHelp;
    return args.empty() ? 2 : 0;
  }
  if (args[0] != "show" || args.size() != 2) {
    return usage("loom mindir: expected `show FILE`", kMindirHelp);
  }
  try {
    mindir::GraphCell cell = load_model(args[1]);
    std::cout << args[1] << ": producer " << cell.producer() << " " << cell.model_version();
    if (cell.mind_ir_version() > 0) std::cout << ", mind_ir_version " << cell.mind_ir_version();
    std::cout << "\n";
    std::cout << "inputs:\n";
    for (const auto& i : cell.inputs()) {
      std::cout << "  " << i.name << "  " << dtype_name(i.dtype) << " " << shape_text(i.shape)
                << "\n";
    }
    std::cout << "outputs:\n";
    for (const auto& o : cell.outputs()) {
      std::cout << "  " << o.name << "  " << dtype_name(o.dtype) << " " << shape_text(o.shape)
                << "\n";
    }
    std::cout << "ops:\n";
    for (const auto& [op, n] : cell.op_counts()) std::cout << "  " << op << "  " << n << "\n";
    std::int64_t total = 0;
    std::cout << "parameters:\n";
    for (const auto& [name, t] : cell.parameters()) {
      std::cout << "  " << name << "  " << dtype_name(t.dtype()) << " " << shape_text(t.shape())
                << "\n";
      total += t.numel();
    }
    std::cout << cell.parameters().size() << " parameters, " << total << " values\n";
    return 0;
  } catch (const Error& e) {
    std::cerr << "loom mindir: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace loom::tools
