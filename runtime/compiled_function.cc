// The compiled-function cache: build, pipeline (with dumps), compile, run, observers.
#include "runtime/compiled_function.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <mutex>

#include "backends/backend.h"
#include "backends/eager.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/ir/verify.h"
#include "core/passes/amp.h"
#include "core/passes/infer.h"
#include "core/passes/pass.h"

namespace loom::runtime {

namespace {

std::mutex& default_observers_mutex() {
  static std::mutex mu;
  return mu;
}
ObserverList& default_observer_list() {
  static ObserverList list;
  return list;
}

}  // namespace

void add_default_observer(std::shared_ptr<Observer> observer) {
  if (!observer) throw ValueError("add_default_observer: expected an observer, got null");
  std::lock_guard<std::mutex> lock(default_observers_mutex());
  default_observer_list().push_back(std::move(observer));
}

void remove_default_observer(const Observer* observer) {
  std::lock_guard<std::mutex> lock(default_observers_mutex());
  std::erase_if(default_observer_list(), [&](const auto& o) { return o.get() == observer; });
}

ObserverList default_observers() {
  std::lock_guard<std::mutex> lock(default_observers_mutex());
  return default_observer_list();
}

Program::Program() = default;
Program::Program(std::unique_ptr<ir::Module> module, ir::FuncGraph* graph,
                 std::vector<std::pair<std::size_t, std::size_t>> donate,
                 std::shared_ptr<void> info)
    : module(std::move(module)), graph(graph), donate(std::move(donate)), info(std::move(info)) {}
Program::~Program() = default;
Program::Program(Program&&) noexcept = default;
Program& Program::operator=(Program&&) noexcept = default;

CompiledFunction::CompiledFunction(Build build, FunctionOptions options)
    : build_(std::move(build)),
      options_(std::move(options)),
      observers_(std::make_shared<ObserverList>(default_observers())) {
  if (!build_) throw ValueError("CompiledFunction: expected a builder, got none");
  // fold_constants computes through this hook (core/passes cannot call a kernel itself).
  if (!passes::constant_evaluator()) {
    passes::set_constant_evaluator([](const ir::Primitive& p, const std::vector<ir::Value>& a) {
      return backend::run_op(p, a);
    });
  }
}

CompiledFunction::~CompiledFunction() = default;

std::unique_ptr<CompiledFunction> CompiledFunction::of_graph(ir::FuncGraph* graph,
                                                             FunctionOptions options) {
  return std::make_unique<CompiledFunction>(
      [graph](const std::vector<ir::AbstractPtr>& signature, const Dump&) {
        passes::infer_graph(graph, signature);
        return Program(nullptr, graph);
      },
      std::move(options));
}

namespace {

bool wants_intact_inputs(const ObserverList& list) {
  return std::any_of(list.begin(), list.end(),
                     [](const auto& o) { return o->needs_intact_inputs(); });
}

}  // namespace

CompiledFunction::Entry& CompiledFunction::entry(const std::vector<ir::AbstractPtr>& signature,
                                                 std::string_view variant) {
  const bool keep_inputs = wants_intact_inputs(*observers_);
  std::string key;
  for (const ir::AbstractPtr& a : signature) {
    key += a ? a->to_string() : "?";
    key += ';';
  }
  key += variant;
  if (keep_inputs) key += ";intact";
  auto it = cache_.find(key);
  if (it != cache_.end()) return *it->second;

  const auto start = std::chrono::steady_clock::now();
  const std::string& text =
      options_.passes.empty() ? passes::pipeline(options_.purpose) : options_.passes;
  passes::PassManagerOptions pm_options;
  pm_options.dump_input = false;  // the builder dumps its stages; the last is the pipeline's input
  passes::PassManager pm = passes::PassManager::parse(text, pm_options);
  if (!options_.save_graphs_dir.empty()) {
    std::string dir = options_.save_graphs_dir + "/" + options_.name;
    if (num_programs_ > 0) dir += "_" + std::to_string(num_programs_);
    pm.set_save_graphs_dir(dir);
  }
  ++num_programs_;
  auto e = std::make_unique<Entry>();
  e->program = build_(signature, [&pm](const ir::Module& m, const std::string& label) {
    pm.dump(m, label);
  });
  Program& p = e->program;
  if (p.graph == nullptr) throw InternalError("CompiledFunction: the builder made no graph");
  if (p.module) {  // of_graph's programs have none: they run as given
    const std::size_t params = p.graph->parameters().size();
    pm.run(*p.module);
    if (p.module->entry() != p.graph || p.graph->parameters().size() != params) {
      throw InternalError("CompiledFunction: the passes changed the signature of @" +
                          p.graph->name());
    }
  }
  backend::Backend& b = options_.backend ? *options_.backend : backend::cpu_backend();
  if (p.module) {
    const std::vector<std::string> slow = passes::compute_low_precision_in_float32(
        *p.module, [&b](std::string_view op, DType dtype) {
          return b.find_kernel(op, dtype) != nullptr;
        });
    if (!slow.empty()) {
      pm.dump(*p.module, "float32_kernels");
      std::vector<std::string> all;
      std::set_union(float32_fallbacks_.begin(), float32_fallbacks_.end(), slow.begin(),
                     slow.end(), std::back_inserter(all));
      float32_fallbacks_ = std::move(all);
    }
  }
  CompileOptions co;
  co.donate = p.donate;
  co.keep_inputs = keep_inputs;
  co.interpret = options_.interpret;
  co.max_loop_iterations = options_.max_loop_iterations;
  co.shared_arena = options_.shared_arena;
  e->exe = compile(*p.graph, b, co);
  ++num_compilations_;
  compile_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return *cache_.emplace(key, std::move(e)).first->second;
}

ir::Value CompiledFunction::run(Entry& entry, std::vector<ir::Value> args) {
  if (entry.observers_version != observers_version_) {
    entry.exe->set_observers(observers_->empty() ? nullptr : observers_);
    entry.observers_version = observers_version_;
  }
  last_ = &entry;
  if (observers_->empty()) return entry.exe->run(std::move(args));
  const std::shared_ptr<ObserverList> observers = observers_;  // the list this run started with
  const std::vector<ir::Value> given = args;  // handles: the tensors are shared, not copied
  notify_run_begin(*observers, RunEvent{options_.name, *entry.program.graph, given, nullptr});
  ir::Value out = entry.exe->run(std::move(args));
  notify_run_end(*observers, RunEvent{options_.name, *entry.program.graph, given, &out});
  return out;
}

ir::Value CompiledFunction::operator()(std::vector<ir::Value> args, std::string_view variant) {
  std::vector<ir::AbstractPtr> signature;
  signature.reserve(args.size());
  for (const ir::Value& v : args) signature.push_back(ir::Abstract::of_value(v));
  return run(entry(signature, variant), std::move(args));
}

void CompiledFunction::add_observer(std::shared_ptr<Observer> observer) {
  if (!observer) throw ValueError("add_observer: expected an observer, got null");
  // A new list, so that a plan running now keeps the one it started with.
  auto list = std::make_shared<ObserverList>(*observers_);
  list->push_back(std::move(observer));
  observers_ = std::move(list);
  ++observers_version_;
}

void CompiledFunction::remove_observer(const Observer* observer) {
  auto list = std::make_shared<ObserverList>(*observers_);
  std::erase_if(*list, [&](const auto& o) { return o.get() == observer; });
  observers_ = std::move(list);
  ++observers_version_;
}

void CompiledFunction::set_passes(std::string pipeline) {
  if (!pipeline.empty()) passes::PassManager::parse(pipeline);  // checked now
  options_.passes = std::move(pipeline);
  clear();
}

void CompiledFunction::set_save_graphs_dir(std::string dir) {
  options_.save_graphs_dir = std::move(dir);
  clear();
}

void CompiledFunction::set_interpret(bool interpret) {
  if (interpret == options_.interpret) return;
  options_.interpret = interpret;
  clear();
}

void CompiledFunction::clear() {
  cache_.clear();
  last_ = nullptr;
  num_programs_ = 0;
}

}  // namespace loom::runtime
