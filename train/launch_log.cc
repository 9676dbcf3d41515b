// train/launch_log.h: the launch CSV.
#include "train/launch_log.h"

#include "core/ir/error.h"

namespace loom::train {

namespace {

// A CSV field, quoted when it holds a comma, a quote or a line break.
std::string field(std::string_view s) {
  if (s.find_first_of(",\"\n") == std::string_view::npos) return std::string(s);
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

std::string tensors(std::span<const Tensor> ts) {
  std::string s;
  for (const Tensor& t : ts) {
    if (!s.empty()) s += ';';
    s += std::string(dtype_name(t.dtype())) + shape_to_string(t.shape());
  }
  return s;
}

}  // namespace

LaunchLog::LaunchLog(std::string path, std::int64_t step) : path_(std::move(path)), step_(step) {
  if (path_.empty()) throw ValueError("LaunchLog: expected a file path, got ''");
  if (step_ < 1) {
    throw ValueError("LaunchLog: expected a step >= 1, got " + std::to_string(step_));
  }
}

void LaunchLog::on_train_step_begin(nn::RunContext& rc) {
  active_ = rc.cur_step_num == step_;
  current_ = rc.cur_step_num;
}

void LaunchLog::after_launch(const runtime::LaunchEvent& e) {
  if (!active_) return;
  ++launches_;
  rows_ += std::to_string(current_) + "," + std::to_string(e.index) + "," +
           std::to_string(e.depth) + "," + field(e.graph) + "," + field(e.op) + "," +
           field(e.name) + "," + field(e.debug.scope) + "," + field(e.debug.file) + "," +
           std::to_string(e.debug.line) + "," + std::string(ir::role_name(e.debug.role)) + "," +
           field(e.debug.forward) + "," + field(tensors(e.inputs)) + "," +
           field(tensors(e.outputs)) + "," + std::to_string(e.elapsed_ns / 1000.0) + "\n";
}

void LaunchLog::on_train_step_end(nn::RunContext& rc) {
  if (!active_) return;
  active_ = false;
  std::ofstream out(path_, std::ios::binary | std::ios::trunc);
  out << "step,index,depth,graph,op,name,scope,file,line,role,forward,inputs,outputs,us\n"
      << rows_;
  out.close();
  if (!out) throw FormatError("--launch-log: expected a writable file, got '" + path_ + "'");
  written_ = true;
  rows_.clear();
}

}  // namespace loom::train
