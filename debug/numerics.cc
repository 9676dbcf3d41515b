// --check-numerics (debug/numerics.h).
#include "debug/numerics.h"

#include <cstdio>
#include <mutex>

#include "backends/backend.h"
#include "debug/dump.h"
#include "debug/tensor_stats.h"

namespace loom::debug {

namespace {

std::string stats_text(const Tensor& t) {
  const TensorStats s = tensor_stats(t);
  char buf[256];
  std::snprintf(buf, sizeof buf, "min %.6g max %.6g mean %.6g, NaN %lld, Inf %lld", s.min, s.max,
                s.mean, static_cast<long long>(s.nan),
                static_cast<long long>(s.neg_inf + s.pos_inf));
  return buf;
}

std::string type_text(const Tensor& t) {
  std::string s = std::string(dtype_name(t.dtype())) + " (";
  for (std::size_t i = 0; i < t.shape().size(); ++i) {
    s += (i ? ", " : "") + std::to_string(t.shape()[i]);
  }
  return s + ")";
}

}  // namespace

NumericsChecker::NumericsChecker(NumericsOptions options) : options_(std::move(options)) {}
NumericsChecker::~NumericsChecker() = default;

void NumericsChecker::run_begin(const runtime::RunEvent& e) {
  auto [it, added] = programs_.try_emplace(&e.graph);
  if (added) {
    it->second.id = static_cast<std::int64_t>(programs_.size()) - 1;
    it->second.function = std::string(e.function);
  }
  current_ = &it->second;
  found_.reset();
  iteration_ = step_ ? *step_ : it->second.runs;
  ++it->second.runs;
}

void NumericsChecker::run_end(const runtime::RunEvent&) { current_ = nullptr; }

void NumericsChecker::on_train_step_begin(nn::RunContext& rc) { step_ = rc.cur_step_num - 1; }
void NumericsChecker::on_train_step_end(nn::RunContext&) { step_.reset(); }

void NumericsChecker::after_launch(const runtime::LaunchEvent& e) {
  if (e.op == ir::kIfPrim || e.op == ir::kWhilePrim) return;  // their launches were checked
  ++launches_checked_;
  if (!options_.stop && found_) return;  // recording: the run's first only
  std::int64_t bad_output = -1;
  for (std::size_t i = 0; i < e.outputs.size() && bad_output < 0; ++i) {
    if (!is_floating(e.outputs[i].dtype())) continue;
    if (count_non_finite(backend::to_host(e.outputs[i])) > 0) {
      bad_output = static_cast<std::int64_t>(i);
    }
  }
  if (bad_output < 0) return;

  NumericsReport r;
  r.function = current_ ? current_->function : std::string(e.graph);
  r.graph = current_ ? current_->id : 0;
  r.iteration = iteration_;
  r.in_training_step = step_.has_value();
  r.op = std::string(e.op);
  r.op_name = dump_op_name(e);
  r.full_name = dump_full_name(e, r.op_name);
  r.scope = e.debug.scope;
  r.file = e.debug.file;
  r.line = e.debug.line;
  r.role = e.debug.role;
  r.forward = e.debug.forward;
  r.graph_name = std::string(e.graph);
  r.output = bad_output;
  const Tensor out = backend::to_host(e.outputs[static_cast<std::size_t>(bad_output)]);
  const TensorStats os = tensor_stats(out);
  r.nan = os.nan;
  r.inf = os.neg_inf + os.pos_inf;
  r.count = os.count;

  std::string m = "check-numerics: ";
  m += r.in_training_step ? "step " + std::to_string(r.iteration + 1)
                          : "run " + std::to_string(r.iteration + 1) + " of " + r.function;
  m += ": " + r.op_name + " produced " + std::to_string(r.nan) + " NaN and " +
       std::to_string(r.inf) + " Inf of " + std::to_string(r.count) + " values in output " +
       std::to_string(r.output) + "\n";
  m += "  node:  %" + std::string(e.label) + " = " + r.op + " in @" + r.graph_name + "\n";
  m += "  Cell:  " + (r.scope.empty() ? std::string("(no scope)") : r.scope);
  if (!r.file.empty()) m += "  " + r.file + ":" + std::to_string(r.line);
  m += "\n  role:  " + std::string(ir::role_name(r.role));
  if (r.role == ir::Role::kBackward && !r.forward.empty()) m += ", the gradient of " + r.forward;
  m += "\n";
  for (std::size_t i = 0; i < e.inputs.size(); ++i) {
    const Tensor t = backend::to_host(e.inputs[i]);
    m += "  input " + std::to_string(i) + ": " + type_text(t);
    // An update writes its result over its parameter input: that buffer now holds the output.
    std::int64_t overwritten = -1;
    for (std::size_t j = 0; j < e.outputs.size(); ++j) {
      if (e.outputs[j].numel() > 0 && e.inputs[i].raw_data() == e.outputs[j].raw_data()) {
        overwritten = static_cast<std::int64_t>(j);
      }
    }
    if (overwritten >= 0) {
      m += ", updated in place: it holds output " + std::to_string(overwritten) + " now";
    } else if (is_floating(t.dtype())) {
      m += ", " + stats_text(t);
    }
    m += "\n";
  }
  m += "  output " + std::to_string(r.output) + ": " + type_text(out) + ", " + stats_text(out);
  if (!options_.dump_dir.empty()) {
    r.dump_dir = options_.dump_dir + "/rank_" + std::to_string(options_.rank) + "/" +
                 options_.net_name + "/" + std::to_string(r.graph) + "/" +
                 std::to_string(r.iteration);
    for (std::size_t i = 0; i < e.inputs.size(); ++i) {
      write_dump_npy(r.dump_dir, r.op, r.op_name, "input", static_cast<std::int64_t>(i),
                     e.inputs[i], last_timestamp_);
    }
    for (std::size_t i = 0; i < e.outputs.size(); ++i) {
      write_dump_npy(r.dump_dir, r.op, r.op_name, "output", static_cast<std::int64_t>(i),
                     e.outputs[i], last_timestamp_);
    }
    m += "\n  the node's inputs and outputs: " + r.dump_dir + "/" + r.op + "." + r.op_name + ".*";
  }
  if (options_.stop) throw NumericsError(m, std::move(r));
  std::string line = r.in_training_step ? "step " + std::to_string(r.iteration + 1)
                                        : "run " + std::to_string(r.iteration + 1) + " of " +
                                              r.function;
  line += ": first non-finite value: " + r.op_name + " (" + std::to_string(r.nan) + " NaN, " +
          std::to_string(r.inf) + " Inf of " + std::to_string(r.count) + "), " +
          (r.scope.empty() ? std::string("no scope") : r.scope);
  if (r.role == ir::Role::kBackward && !r.forward.empty()) line += ", the gradient of " + r.forward;
  if (!r.dump_dir.empty()) line += "; its tensors in " + r.dump_dir;
  found_ = std::move(r);
  if (options_.on_found) options_.on_found(*found_, line);
}

namespace {

std::mutex& global_mutex() {
  static std::mutex mu;
  return mu;
}
std::shared_ptr<NumericsChecker>& global_checker() {
  static std::shared_ptr<NumericsChecker> checker;
  return checker;
}

}  // namespace

void set_check_numerics(bool on, NumericsOptions options) {
  std::lock_guard<std::mutex> lock(global_mutex());
  std::shared_ptr<NumericsChecker>& g = global_checker();
  if (g) {
    runtime::remove_default_observer(g.get());
    g.reset();
  }
  if (on) {
    g = std::make_shared<NumericsChecker>(std::move(options));
    runtime::add_default_observer(g);
  }
}

bool check_numerics() {
  std::lock_guard<std::mutex> lock(global_mutex());
  return global_checker() != nullptr;
}

}  // namespace loom::debug
