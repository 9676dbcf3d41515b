// The pass framework itself: the registry's names and messages, pipeline text, repeat groups
// run to a fixed point (and the error when they never get there), verification after every
// pass naming the pass that broke the module, and timings. The passes' rewrites are tested as
// .ir files next to this one.
#include "core/passes/pass.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/ir/manager.h"
#include "core/ir/parser.h"
#include "core/ir/printer.h"
#include "core/ir/verify.h"

namespace loom::passes {
namespace {

// The message of the loom::Error that `fn` throws, or "" when it throws none.
template <typename E, typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

std::unique_ptr<ir::Module> small_module() {
  return ir::parse_module(R"(
subgraph @main(%x) {
  %0 = @f(%x)
  Return(%0)
}
subgraph @f(%p) {
  %0 = Neg(%p)
  Return(%0)
}
)");
}

// A registry of test passes that log each run: "a" and "b" change the module for the first
// `changes` runs each (without touching it, which the framework cannot tell apart).
struct Logged {
  PassRegistry registry;
  std::vector<std::string> log;
  int a_changes = 0;
  int b_changes = 0;

  Logged() {
    registry.add({"a", "test pass a", [this](ir::Module&) {
                    log.push_back("a");
                    return a_changes-- > 0;
                  }});
    registry.add({"b", "test pass b", [this](ir::Module&) {
                    log.push_back("b");
                    return b_changes-- > 0;
                  }});
    registry.add({"never_done", "always reports a change", [this](ir::Module&) {
                    log.push_back("never_done");
                    return true;
                  }});
    // Calls @f with two arguments although it takes one: call arity is invariant 8.
    registry.add({"break_arity", "makes a call of the wrong arity", [this](ir::Module& m) {
                    log.push_back("break_arity");
                    ir::Manager mgr(m);
                    ir::FuncGraph* main = m.entry();
                    ir::Parameter* x = main->parameter(0);
                    mgr.set_output(main, main->add_call(m.find_graph("f"), {x, x}));
                    return true;
                  }});
  }
};

TEST(PassManagerRegistryTest, BuiltinPassesAreSortedAndSummarized) {
  const PassRegistry& r = PassRegistry::global();
  // The list grows as passes land; these are its fixed points (sorted, comma-separated).
  const std::string names = r.names();
  EXPECT_EQ(names.rfind("combine_updates, cse, dce, fold_constants, ", 0), 0u) << names;
  EXPECT_NE(names.find(", infer, inline, "), std::string::npos) << names;
  EXPECT_TRUE(names.ends_with(", simplify")) << names;
  for (const PassInfo* p : r.all()) {
    EXPECT_FALSE(p->summary.empty()) << p->name;
    EXPECT_EQ(p->summary.find('\n'), std::string::npos) << p->name << ": one line";
    EXPECT_EQ(r.find(p->name), p);
  }
  EXPECT_EQ(r.find("foo"), nullptr);
}

TEST(PassManagerRegistryTest, UnknownNameListsThePasses) {
  EXPECT_EQ(error_of<ValueError>([] { PassRegistry::global().get("foo"); }),
            "expected a pass of (" + PassRegistry::global().names() + "), got 'foo'");
}

TEST(PassManagerRegistryTest, RefusesBadNamesDuplicatesAndMissingRun) {
  PassRegistry r;
  auto noop = [](ir::Module&) { return false; };
  EXPECT_EQ(error_of<InternalError>([&] { r.add({"Fold-Constants", "x", noop}); }),
            "PassRegistry: expected a snake_case pass name, got 'Fold-Constants'");
  r.add({"fold_constants", "x", noop});
  EXPECT_EQ(error_of<InternalError>([&] { r.add({"fold_constants", "x", noop}); }),
            "PassRegistry: expected a new pass name, got duplicate 'fold_constants'");
  EXPECT_EQ(error_of<InternalError>([&] { r.add({"cse", "x", nullptr}); }),
            "PassRegistry: expected a run function for 'cse', got none");
}

TEST(PassManagerTest, ParsesPipelineText) {
  EXPECT_EQ(PassManager::parse("inline,simplify,dce").pipeline(), "inline,simplify,dce");
  EXPECT_EQ(PassManager::parse(" inline , repeat( simplify ,dce ) ").pipeline(),
            "inline,repeat(simplify,dce)");
  EXPECT_EQ(PassManager::parse("repeat(simplify)").timings().size(), 1u);
}

TEST(PassManagerTest, PipelineErrorsSayWhatWasExpected) {
  auto parse_error = [](const char* text) {
    return error_of<ValueError>([&] { PassManager::parse(text); });
  };
  const std::string list = "expected a pass of (" + PassRegistry::global().names() + "), got ";
  EXPECT_EQ(parse_error("inline,foo"), list + "'foo'");
  EXPECT_EQ(parse_error("inline,,dce"), list + "''");
  EXPECT_EQ(parse_error(""), list + "''");
  EXPECT_EQ(parse_error("fold-constants"), list + "'fold-constants'");
  EXPECT_EQ(parse_error("inline)dce"), "expected ',' between passes, got ')dce'");
  EXPECT_EQ(parse_error("repeat(simplify"),
            "expected ',' or ')' in repeat(...), got end of pipeline");
  EXPECT_EQ(parse_error("repeat()"), list + "''");
  EXPECT_EQ(error_of<ValueError>([] { PassManager().add_repeat({}); }),
            "expected a pass inside repeat(...), got none");
}

TEST(PassManagerTest, RunsPassesInOrderAndReportsChange) {
  Logged t;
  auto m = small_module();
  PassManager pm = PassManager::parse("a,b,a", {}, t.registry);
  EXPECT_FALSE(pm.run(*m));
  EXPECT_EQ(t.log, (std::vector<std::string>{"a", "b", "a"}));

  t.log.clear();
  t.b_changes = 1;
  EXPECT_TRUE(pm.run(*m));
  EXPECT_EQ(pm.timings().size(), 3u);
  EXPECT_EQ(pm.timings()[1].name, "b");
  EXPECT_EQ(pm.timings()[1].runs, 2);  // timings accumulate over runs
  EXPECT_EQ(pm.timings()[1].changed_runs, 1);
}

TEST(PassManagerTest, RepeatGroupRunsUntilARoundChangesNothing) {
  Logged t;
  t.a_changes = 2;
  t.b_changes = 3;
  auto m = small_module();
  PassManager pm = PassManager::parse("repeat(a,b),a", {}, t.registry);
  EXPECT_TRUE(pm.run(*m));
  // Rounds 1-3 change (b changes in its first three runs); round 4 changes nothing.
  EXPECT_EQ(t.log, (std::vector<std::string>{"a", "b", "a", "b", "a", "b", "a", "b", "a"}));
  EXPECT_EQ(pm.timings()[0].runs, 4);
  EXPECT_EQ(pm.timings()[0].changed_runs, 2);
  EXPECT_EQ(pm.timings()[1].runs, 4);
  EXPECT_EQ(pm.timings()[1].changed_runs, 3);
  EXPECT_EQ(pm.timings()[2].runs, 1);
}

TEST(PassManagerTest, RepeatGroupThatNeverSettlesIsAnError) {
  Logged t;
  auto m = small_module();
  PassManager::Options options;
  options.max_rounds = 5;
  PassManager pm = PassManager::parse("a,repeat(b,never_done)", options, t.registry);
  EXPECT_EQ(error_of<InternalError>([&] { pm.run(*m); }),
            "PassManager: expected repeat(b,never_done) to reach a fixed point within 5 rounds, "
            "got a change in every round");
  EXPECT_EQ(pm.timings()[2].runs, 5);
}

TEST(PassManagerTest, VerifyAfterEachPassNamesTheBrokenPass) {
  Logged t;
  auto m = small_module();
  PassManager::Options options;
  options.verify = true;
  PassManager pm = PassManager::parse("a,break_arity,b", options, t.registry);
  try {
    pm.run(*m);
    FAIL() << "expected a VerifyError";
  } catch (const ir::VerifyError& e) {
    EXPECT_EQ(e.invariant(), 8);
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("PassManager: expected pass 'break_arity' to leave valid IR, got "
                         "verify: invariant 8 (call arity) violated in @main: expected the call "
                         "of @f to pass 1 argument (one per parameter), got 2",
                         0),
              0u)
        << what;
  }
  EXPECT_EQ(t.log, (std::vector<std::string>{"a", "break_arity"}));  // b never ran
}

TEST(PassManagerTest, WithoutVerifyABrokenModuleGoesThrough) {
  Logged t;
  auto m = small_module();
  PassManager::Options options;
  options.verify = false;
  PassManager pm = PassManager::parse("break_arity,b", options, t.registry);
  EXPECT_TRUE(pm.run(*m));
  EXPECT_EQ(t.log, (std::vector<std::string>{"break_arity", "b"}));
}

TEST(PassManagerTest, InvalidInputIsReportedBeforeAnyPassRuns) {
  Logged t;
  auto m = ir::parse_module("subgraph @main(%x) { %0 = @f(%x, %x) Return(%0) }\n"
                            "subgraph @f(%p) { Return(%p) }\n");
  PassManager::Options options;
  options.verify = true;
  PassManager pm = PassManager::parse("a", options, t.registry);
  const std::string what = error_of<ir::VerifyError>([&] { pm.run(*m); });
  EXPECT_EQ(what.rfind("verify: invariant 8 (call arity)", 0), 0u) << what;
  EXPECT_TRUE(t.log.empty());
}

TEST(PassManagerTest, TimingReportListsEverySlotAndATotal) {
  Logged t;
  auto m = small_module();
  PassManager pm = PassManager::parse("a,repeat(b)", {}, t.registry);
  pm.run(*m);
  const std::string report = pm.timing_report();
  EXPECT_EQ(report.rfind("pass", 0), 0u) << report;
  EXPECT_NE(report.find("\na "), std::string::npos) << report;
  EXPECT_NE(report.find("\nb "), std::string::npos) << report;
  EXPECT_NE(report.find("\ntotal "), std::string::npos) << report;
  for (const PassTiming& timing : pm.timings()) EXPECT_GE(timing.seconds, 0.0);
}

// The built-in pipeline over the module autodiff produces: a call chain becomes one graph.
TEST(PassManagerTest, BuiltinPipelineFlattensCalls) {
  auto m = ir::parse_module(R"(
subgraph @main(%x) {
  %0 = @twice(%x)
  %1 = MakeTuple(%0, %x)
  %2 = TupleGetItem(%1, I64(0))
  Return(%2)
}
subgraph @twice(%p) {
  %0 = @neg(%p)
  %1 = @neg(%0)
  Return(%1)
}
subgraph @neg(%q) {
  %0 = Neg(%q)
  Return(%0)
}
)");
  PassManager pm = PassManager::parse("inline,repeat(simplify,dce)");
  EXPECT_TRUE(pm.run(*m));
  EXPECT_EQ(ir::print_module(*m),
            "# IR entry: @main\n"
            "# Total subgraphs: 1\n"
            "\n"
            "subgraph @main(%x) {\n"
            "  %0 = Neg(%x)\n"
            "  %1 = Neg(%0)\n"
            "  Return(%1)\n"
            "}\n");
  EXPECT_FALSE(pm.run(*m));  // a second run finds nothing to do
}

// fold_constants computes through the installed evaluator only: without one it changes nothing,
// and a call the evaluator refuses stays. (ir-opt installs the CPU kernels; the .ir tests of
// fold_constants run through it.)
TEST(FoldConstantsTest, UsesTheInstalledEvaluatorOnly) {
  constexpr char kText[] = R"(
subgraph @main() {
  %0 = Neg(Tensor(shape=[1], dtype=Float32, value=[2]))
  %1 = Exp(Tensor(shape=[1], dtype=Float32, value=[3]))
  %2 = MakeTuple(%0, %1)
  Return(%2)
}
)";
  auto m = ir::parse_module(kText);
  const std::string before = ir::print_module(*m);
  PassManager pm = PassManager::parse("fold_constants");
  set_constant_evaluator(nullptr);
  EXPECT_FALSE(pm.run(*m));
  EXPECT_EQ(ir::print_module(*m), before);

  std::vector<std::string> calls;
  // Gives back its first argument for Neg, refuses everything else as a backend would.
  set_constant_evaluator([&](const ir::Primitive& prim, const std::vector<ir::Value>& args) {
    calls.push_back(prim.name());
    if (prim.name() != "Neg") throw TypeError(prim.name() + ": expected a CPU kernel, got none");
    return args.at(0);
  });
  const bool changed = pm.run(*m);
  set_constant_evaluator(nullptr);
  EXPECT_TRUE(changed);
  EXPECT_EQ(calls, (std::vector<std::string>{"Neg", "Exp"}));  // MakeTuple reads %1, not a constant
  EXPECT_EQ(ir::print_module(*m),
            "# IR entry: @main\n"
            "# Total subgraphs: 1\n"
            "\n"
            "subgraph @main() {\n"
            "  %0 = Exp(Tensor(shape=[1], dtype=Float32, value=[3]))\n"
            "  %1 = MakeTuple(Tensor(shape=[1], dtype=Float32, value=[2]), %0)\n"
            "  Return(%1)\n"
            "}\n");
}

}  // namespace
}  // namespace loom::passes
