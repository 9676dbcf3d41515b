// export_mindir: trace a Cell in inference mode, run the inference passes, write the file
// (mindir.h). Separate from mindir.cc, the only part of the room that needs nn/.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/eager.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/passes/infer.h"
#include "core/passes/pass.h"
#include "core/passes/pipeline.h"
#include "mindir/export_graph.h"
#include "mindir/mindir.h"
#include "nn/cell.h"

namespace loom::mindir {

using ir::Abstract;
using ir::AbstractPtr;
using ir::Value;

void write_file_atomically(const std::string& path, const std::string& bytes,
                           const std::string& who) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmpl = (dir / (target.filename().string() + ".tmpXXXXXX")).string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const int fd = ::mkstemp(buf.data());
  if (fd < 0) {
    throw FormatError(who + ": expected a writable directory for '" + path + "', got " +
                      std::strerror(errno));
  }
  ::fchmod(fd, 0644);  // mkstemp makes 0600; a model file is meant to be shared
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w <= 0) {
      const std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(buf.data());
      throw FormatError(who + ": cannot write '" + path + "': " + err);
    }
    done += static_cast<std::size_t>(w);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(buf.data(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(buf.data());
    throw FormatError(who + ": cannot write '" + path + "': " + err);
  }
}


nn::Traced inference_graph(nn::Cell& net, const std::vector<ir::AbstractPtr>& example_inputs,
                           const std::string& who, const std::string& save_graphs_dir) {
  const bool was_training = net.training();
  net.set_train(false);
  nn::Traced traced;
  try {
    traced = nn::trace(net, example_inputs, net.cls_name() + "_construct");
  } catch (...) {
    net.set_train(was_training);
    throw;
  }
  net.set_train(was_training);
  if (!traced.updates.empty()) {
    throw ValueError(who + ": expected no state updates in inference mode, got an "
                     "assignment of '" + traced.updates[0]->name + "'");
  }
  // The inference pipeline; fold_constants evaluates with the CPU kernels (installed for this
  // run only, the previous evaluator is put back).
  const passes::ConstantEvaluator previous = passes::constant_evaluator();
  passes::set_constant_evaluator([](const ir::Primitive& p, const std::vector<Value>& args) {
    return backend::run_op(p, args);
  });
  try {
    passes::PassManagerOptions pm_options;
    pm_options.dump_input = false;  // "traced" below is the pipeline's input
    passes::PassManager pm =
        passes::PassManager::parse(passes::pipeline(passes::Purpose::kExport), pm_options);
    if (!save_graphs_dir.empty()) {
      pm.set_save_graphs_dir(save_graphs_dir + "/export");
      pm.dump(*traced.module, "traced");
    }
    pm.run(*traced.module);
  } catch (...) {
    passes::set_constant_evaluator(previous);
    throw;
  }
  passes::set_constant_evaluator(previous);
  passes::infer_graph(traced.graph, {});
  return traced;
}

void export_mindir(nn::Cell& net, const std::vector<ir::AbstractPtr>& example_inputs,
                   const std::string& path, const ExportOptions& options) {
  nn::Traced traced =
      inference_graph(net, example_inputs, "MindIR export", options.save_graphs_dir);
  ExportOptions o = options;
  if (o.graph_name.empty()) o.graph_name = net.cls_name() + "_construct";
  write_file_atomically(path, serialize_graph(*traced.graph, example_inputs.size(), o),
                        "MindIR export");
}

void export_mindir(nn::Cell& net, const std::vector<Tensor>& example_inputs,
                   const std::string& path, const ExportOptions& options) {
  std::vector<AbstractPtr> a;
  for (const Tensor& t : example_inputs) a.push_back(Abstract::tensor(t.dtype(), t.shape()));
  export_mindir(net, a, path, options);
}

}  // namespace loom::mindir
