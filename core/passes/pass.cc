// The pass registry, the PassManager (pipeline text, repeat groups run to a fixed point,
// verification after every pass, timing, save_graphs dumps), the constant-evaluator hook of
// fold_constants, and the helpers the passes share (copying a graph's
// body, fresh node names, the graph-by-graph skeleton rewrite_graphs).
#include "core/passes/pass.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "core/ir/anf.h"
#include "core/ir/dot.h"
#include "core/ir/error.h"
#include "core/ir/manager.h"
#include "core/ir/printer.h"
#include "core/ir/value.h"
#include "core/ir/verify.h"

namespace loom::passes {

// Declared here rather than in pass.h beside the others: infer's public entry points live in
// infer.h, and pass.h stays as it is.
void register_infer(PassRegistry& registry);

namespace {

bool is_snake_case(std::string_view name) {
  if (name.empty() || !(name[0] >= 'a' && name[0] <= 'z')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

}  // namespace

// ---- PassRegistry ---------------------------------------------------------------------------

bool rewrite_graphs(ir::Module& module,
                    const std::function<bool(ir::Manager&, ir::FuncGraph&)>& rewrite) {
  ir::Manager mgr(module);
  bool changed = false;
  for (ir::FuncGraph* graph : module.reachable_graphs()) changed |= rewrite(mgr, *graph);
  return changed;
}

const PassRegistry& PassRegistry::global() {
  static const PassRegistry* registry = [] {
    auto* r = new PassRegistry();
    register_inline(*r);
    register_simplify(*r);
    register_dce(*r);
    register_infer(*r);
    register_cse(*r);
    register_fold_constants(*r);
    register_fuse(*r);
    register_recompute(*r);
    register_combine_updates(*r);
    return r;
  }();
  return *registry;
}

void PassRegistry::add(PassInfo info) {
  if (!is_snake_case(info.name)) {
    throw InternalError("PassRegistry: expected a snake_case pass name, got '" + info.name + "'");
  }
  if (find(info.name)) {
    throw InternalError("PassRegistry: expected a new pass name, got duplicate '" + info.name +
                        "'");
  }
  if (!info.run) {
    throw InternalError("PassRegistry: expected a run function for '" + info.name +
                        "', got none");
  }
  passes_.push_back(std::make_unique<PassInfo>(std::move(info)));
}

const PassInfo* PassRegistry::find(std::string_view name) const {
  for (const auto& p : passes_) {
    if (p->name == name) return p.get();
  }
  return nullptr;
}

const PassInfo& PassRegistry::get(std::string_view name) const {
  const PassInfo* p = find(name);
  if (!p) {
    throw ValueError("expected a pass of (" + names() + "), got '" + std::string(name) + "'");
  }
  return *p;
}

std::vector<const PassInfo*> PassRegistry::all() const {
  std::vector<const PassInfo*> out;
  for (const auto& p : passes_) out.push_back(p.get());
  std::sort(out.begin(), out.end(),
            [](const PassInfo* a, const PassInfo* b) { return a->name < b->name; });
  return out;
}

std::string PassRegistry::names() const {
  std::string out;
  for (const PassInfo* p : all()) out += (out.empty() ? "" : ", ") + p->name;
  return out;
}

// ---- Constant evaluator ---------------------------------------------------------------------

namespace {

ConstantEvaluator& installed_evaluator() {
  static ConstantEvaluator evaluator;
  return evaluator;
}

}  // namespace

void set_constant_evaluator(ConstantEvaluator evaluator) {
  installed_evaluator() = std::move(evaluator);
}

const ConstantEvaluator& constant_evaluator() { return installed_evaluator(); }

// ---- PassManager ----------------------------------------------------------------------------

bool verify_by_default() {
#if defined(LOOM_VERIFY_IR) || !defined(NDEBUG)
  return true;
#else
  return false;
#endif
}

PassManager::PassManager(Options options, const PassRegistry& registry)
    : options_(options), registry_(&registry) {}

std::size_t PassManager::add_slot(std::string_view name) {
  passes_.push_back(&registry_->get(name));
  timings_.push_back(PassTiming{.name = std::string(name)});
  return passes_.size() - 1;
}

PassManager& PassManager::add(std::string_view name) {
  steps_.push_back(Step{.slots = {add_slot(name)}, .repeat = false});
  return *this;
}

PassManager& PassManager::add_repeat(const std::vector<std::string>& names) {
  if (names.empty()) throw ValueError("expected a pass inside repeat(...), got none");
  for (const std::string& n : names) registry_->get(n);  // all names checked before any is added
  Step step{.slots = {}, .repeat = true};
  for (const std::string& n : names) step.slots.push_back(add_slot(n));
  steps_.push_back(std::move(step));
  return *this;
}

PassManager PassManager::parse(std::string_view text, Options options,
                               const PassRegistry& registry) {
  PassManager pm(options, registry);
  std::size_t i = 0;
  auto skip_space = [&] {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
  };
  // A name runs to the next delimiter, so that "foo-bar" is reported whole as an unknown pass.
  auto read_name = [&] {
    skip_space();
    std::size_t start = i;
    while (i < text.size() && std::string_view(",() \t").find(text[i]) == std::string_view::npos) {
      ++i;
    }
    std::string name(text.substr(start, i - start));
    skip_space();
    return name;
  };
  auto rest = [&] {
    return i < text.size() ? "'" + std::string(text.substr(i)) + "'"
                           : std::string("end of pipeline");
  };
  while (true) {
    std::string name = read_name();
    if (name == "repeat" && i < text.size() && text[i] == '(') {
      ++i;
      std::vector<std::string> group;
      while (true) {
        group.push_back(read_name());
        registry.get(group.back());
        if (i < text.size() && text[i] == ',') {
          ++i;
        } else if (i < text.size() && text[i] == ')') {
          ++i;
          break;
        } else {
          throw ValueError("expected ',' or ')' in repeat(...), got " + rest());
        }
      }
      pm.add_repeat(group);
      skip_space();
    } else {
      pm.add(name);
    }
    if (i == text.size()) break;
    if (text[i] != ',') throw ValueError("expected ',' between passes, got " + rest());
    ++i;
  }
  return pm;
}

std::string PassManager::pipeline() const {
  std::string out;
  for (const Step& step : steps_) {
    if (!out.empty()) out += ",";
    std::string names;
    for (std::size_t slot : step.slots) names += (names.empty() ? "" : ",") + passes_[slot]->name;
    out += step.repeat ? "repeat(" + names + ")" : names;
  }
  return out;
}

PassManager& PassManager::set_save_graphs_dir(std::string dir) {
  save_graphs_dir_ = std::move(dir);
  return *this;
}

void PassManager::save_graphs(const ir::Module& module, const std::string& label,
                              bool with_dot) {
  if (save_graphs_dir_.empty()) return;
  namespace fs = std::filesystem;
  const fs::path dir(save_graphs_dir_);
  std::error_code error;
  fs::create_directories(dir, error);
  if (error || !fs::is_directory(dir)) {
    throw FormatError("PassManager: expected a writable save_graphs directory, got '" +
                      save_graphs_dir_ + "'" + (error ? " (" + error.message() + ")" : ""));
  }
  char index[16];
  std::snprintf(index, sizeof index, "%02d", save_graphs_index_++);
  const std::string base = std::string(index) + "_" + label;
  auto write = [&](const std::string& file, const std::string& text) {
    const fs::path path = dir / file;
    std::ofstream out(path, std::ios::binary);
    out << text;
    out.close();
    if (!out) {
      throw FormatError("PassManager: expected a writable save_graphs file, got '" +
                        path.string() + "'");
    }
  };
  write(base + ".ir", ir::print_module(module));
  if (with_dot) write(base + ".dot", ir::to_dot(module));
}

bool PassManager::run_slot(std::size_t slot, ir::Module& module) {
  const PassInfo& pass = *passes_[slot];
  const auto start = std::chrono::steady_clock::now();
  const bool changed = pass.run(module);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  PassTiming& t = timings_[slot];
  ++t.runs;
  t.changed_runs += changed ? 1 : 0;
  t.seconds += took.count();
  // Dumped before verifying, so that the text of a module a pass broke is there to read.
  save_graphs(module, pass.name, /*with_dot=*/true);
  if (options_.verify) {
    try {
      ir::verify(module);
    } catch (const ir::VerifyError& e) {
      // The verifier's own message stays whole; the prefix says which pass broke the module.
      throw ir::VerifyError(e.invariant(), "PassManager: expected pass '" + pass.name +
                                               "' to leave valid IR, got " + e.what());
    }
  }
  return changed;
}

bool PassManager::run(ir::Module& module) {
  // Passes assume valid input; checking it first keeps a bad input from being blamed on the
  // first pass.
  if (options_.verify) ir::verify(module);
  if (options_.dump_input) save_graphs(module, "input", /*with_dot=*/false);
  bool changed = false;
  for (const Step& step : steps_) {
    if (!step.repeat) {
      changed |= run_slot(step.slots[0], module);
      continue;
    }
    for (int round = 1;; ++round) {
      bool round_changed = false;
      for (std::size_t slot : step.slots) round_changed |= run_slot(slot, module);
      changed |= round_changed;
      if (!round_changed) break;
      if (round == options_.max_rounds) {
        std::string names;
        for (std::size_t slot : step.slots) {
          names += (names.empty() ? "" : ",") + passes_[slot]->name;
        }
        throw InternalError("PassManager: expected repeat(" + names +
                            ") to reach a fixed point within " +
                            std::to_string(options_.max_rounds) +
                            " rounds, got a change in every round");
      }
    }
  }
  return changed;
}

std::string PassManager::timing_report() const {
  std::ostringstream out;
  std::size_t width = 4;
  for (const PassTiming& t : timings_) width = std::max(width, t.name.size());
  char line[256];
  std::snprintf(line, sizeof line, "%-*s %6s %8s %12s\n", static_cast<int>(width), "pass", "runs",
                "changed", "seconds");
  out << line;
  double total = 0;
  for (const PassTiming& t : timings_) {
    std::snprintf(line, sizeof line, "%-*s %6d %8d %12.6f\n", static_cast<int>(width),
                  t.name.c_str(), t.runs, t.changed_runs, t.seconds);
    out << line;
    total += t.seconds;
  }
  std::snprintf(line, sizeof line, "%-*s %6s %8s %12.6f\n", static_cast<int>(width), "total", "",
                "", total);
  out << line;
  return out.str();
}

// ---- Helpers --------------------------------------------------------------------------------

NameSet graph_names(const ir::FuncGraph& graph) {
  NameSet names;
  for (const ir::Parameter* p : graph.parameters()) names.insert(p->name());
  for (const ir::CNode* c : graph.topo_order()) {
    if (!c->name().empty()) names.insert(c->name());
  }
  return names;
}

std::string unique_name(const std::string& base, NameSet& taken) {
  if (base.empty()) return base;
  std::string name = base;
  for (int k = 1; taken.contains(name); ++k) name = base + "_" + std::to_string(k);
  taken.insert(name);
  return name;
}

bool compatible(const ir::AbstractPtr& a, const ir::AbstractPtr& b) {
  return !a || !b || a->accepts(*b) || b->accepts(*a);
}

void keep_precise_abstract(const ir::Node& node, ir::Node& by) {
  const ir::AbstractPtr& known = node.abstract();
  if (!by.is_cnode() || !known) return;
  if (!by.abstract() || (by.abstract()->accepts(*known) && !by.abstract()->equals(*known))) {
    by.set_abstract(known);
  }
}

ir::Node* copy_body(const ir::FuncGraph& source, ir::FuncGraph& target, const NodeMap& params,
                    NameSet& taken) {
  NodeMap map = params;
  auto mapped = [&](ir::Node* node) -> ir::Node* {
    if (node == nullptr) {
      throw InternalError("copy_body: expected non-null nodes in @" + source.name() +
                          ", got null");
    }
    if (auto it = map.find(node); it != map.end()) return it->second;
    if (node->is_value()) {
      // One copy per original constant, so constants shared in the source stay shared.
      ir::Node* copy = target.add_value(static_cast<const ir::ValueNode*>(node)->value());
      map.emplace(node, copy);
      return copy;
    }
    throw InternalError("copy_body: expected a mapping for every parameter @" + source.name() +
                        " uses, got none for %" + node->name());
  };
  for (const ir::CNode* c : source.topo_order()) {
    std::vector<ir::Node*> inputs;
    inputs.reserve(c->size());
    for (ir::Node* in : c->inputs()) inputs.push_back(mapped(in));
    ir::CNode* copy = target.add_cnode(std::move(inputs), c->debug());
    copy->set_abstract(c->abstract());
    copy->set_name(unique_name(c->name(), taken));
    map.emplace(c, copy);
  }
  return mapped(source.output());
}

}  // namespace loom::passes
