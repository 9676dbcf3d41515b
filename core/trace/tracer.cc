// The per-thread tracing state and the Tracer.
#include "core/trace/tracer.h"

#include "core/ir/error.h"

namespace loom::trace {

namespace {

struct ThreadState {
  std::vector<ops::Emitter*> emitters;
  std::vector<std::string> scopes;
  Tracer* tracer = nullptr;
  bool error_has_path = false;
  Site cell_site;                 // the current user call site (set by ScopeGuard)
  const Site* op_site = nullptr;  // a free function's own user call site, while it emits
};

ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

std::string join(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& part : parts) {
    if (!s.empty()) s += '/';
    s += part;
  }
  return s;
}

}  // namespace

ops::Emitter* current() {
  ThreadState& s = state();
  return s.emitters.empty() ? nullptr : s.emitters.back();
}

EmitterScope::EmitterScope(ops::Emitter& emitter) { state().emitters.push_back(&emitter); }
EmitterScope::~EmitterScope() { state().emitters.pop_back(); }

std::string current_scope() { return join(state().scopes); }
std::size_t scope_depth() { return state().scopes.size(); }

ScopeGuard::ScopeGuard(std::string name, const Site* site)
    : saved_site_(state().cell_site), saved_op_site_(state().op_site) {
  ThreadState& s = state();
  s.scopes.push_back(std::move(name));
  if (site) s.cell_site = *site;
  s.op_site = nullptr;
}

ScopeGuard::~ScopeGuard() {
  ThreadState& s = state();
  s.scopes.pop_back();
  s.cell_site = std::move(saved_site_);
  s.op_site = saved_op_site_;
}

OpSiteGuard::OpSiteGuard(const Site* site) : saved_(state().op_site) {
  if (site) state().op_site = site;
}
OpSiteGuard::~OpSiteGuard() { state().op_site = saved_; }

bool& error_has_path() { return state().error_has_path; }

ir::DebugInfo Tracer::debug_for(std::string_view op) {
  const ThreadState& s = state();
  std::vector<std::string> scope = s.scopes;
  scope.emplace_back(op);
  const Site& site = s.op_site ? *s.op_site : s.cell_site;
  return ir::DebugInfo{.scope = join(scope), .file = site.file, .line = site.line};
}

ir::Parameter* Tracer::weight(const void* key, const std::string& name, const Tensor& value) {
  if (parent_) return parent_->weight(key, name, value);
  auto it = weights_.find(key);
  if (it == weights_.end()) {
    ir::Parameter* w =
        target()->add_parameter(name, ir::Abstract::tensor(value.dtype(), value.shape()));
    w->set_default(value);
    it = weights_.emplace(key, w).first;
    weight_order_.push_back(key);
  }
  return it->second;
}

void Tracer::assign(const void* key, const ops::Var& value) {
  if (parent_) {
    throw ValueError("trace: expected no parameter assignment inside a branch or loop body, got "
                     "one (assign before or after the control flow)");
  }
  for (auto& [k, v] : assigned_) {
    if (k == key) {
      v = value;
      return;
    }
  }
  assigned_.emplace_back(key, value);
}

const ops::Var* Tracer::assigned(const void* key) const {
  if (parent_) return parent_->assigned(key);
  for (const auto& [k, v] : assigned_) {
    if (k == key) return &v;
  }
  return nullptr;
}

Tracer* current_tracer() { return state().tracer; }

TracerScope::TracerScope(Tracer& tracer) : saved_(state().tracer) {
  state().emitters.push_back(&tracer);
  state().tracer = &tracer;
}

TracerScope::~TracerScope() {
  state().emitters.pop_back();
  state().tracer = saved_;
}

}  // namespace loom::trace
