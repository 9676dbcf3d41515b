// ir-opt: reads a .ir file (or stdin with "-"), optionally verifies it, runs a pass pipeline,
// and prints the module. Every pass test is an .ir file whose RUN: line calls this tool and
// pipes it into FileCheck. It installs the CPU kernels (backend::run_op) as fold_constants'
// evaluator.
//
//   ir-opt [--verify] [--amp=LEVEL[:DTYPE]] [--passes=inline,simplify,dce | --pipeline=train]
//          [--timing] [--dot] [--save-graphs DIR] FILE
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "backends/eager.h"
#include "core/ir/anf.h"
#include "core/ir/dot.h"
#include "core/ir/error.h"
#include "core/ir/parser.h"
#include "core/ir/printer.h"
#include "core/ir/verify.h"
#include "core/passes/amp.h"
#include "core/passes/infer.h"
#include "core/passes/pass.h"
#include "core/passes/pipeline.h"

namespace {

constexpr char kUsage[] =
    "usage: ir-opt [--verify] [--amp=LEVEL[:DTYPE]] [--passes=LIST | --pipeline=NAME] [--timing]\n"
    "              [--dot] [--save-graphs DIR] FILE\n"
    "  Parses FILE ('-' for standard input), runs the passes and prints the result.\n"
    "  --verify        check the IR invariants (docs/ir.md, Invariants) of the input\n"
    "  --amp=LEVEL[:DTYPE]\n"
    "                  first cast the entry graph for mixed precision as loom train --amp-level\n"
    "                  does to the traced forward graph (core/passes/amp.h): LEVEL O0, O1, O2,\n"
    "                  O3 or auto, DTYPE float16 (default) or bfloat16\n"
    "  --passes=LIST   run a pipeline: pass names separated by commas; repeat(a,b) runs a\n"
    "                  group until it changes nothing. The IR is verified after every pass.\n"
    "  --pipeline=NAME run the pipeline loom itself runs for NAME: train (the training step),\n"
    "                  eval (evaluation and prediction) or export (MindIR)\n"
    "  --timing        print the time each pass took to standard error\n"
    "  --dot           print Graphviz .dot instead of .ir text\n"
    "  --save-graphs DIR\n"
    "                  write DIR/00_input.ir, then NN_<pass>.ir and .dot after every pass\n"
    "passes:\n";

std::string usage() {
  std::string text = kUsage;
  for (const loom::passes::PassInfo* p : loom::passes::PassRegistry::global().all()) {
    text += "  " + p->name + std::string(p->name.size() < 14 ? 14 - p->name.size() : 1, ' ') +
            p->summary + "\n";
  }
  return text;
}

int run(const std::vector<std::string>& args) {
  bool verify = false;
  bool dot = false;
  bool timing = false;
  std::optional<std::string> pipeline;
  std::optional<std::string> save_graphs;
  std::optional<loom::passes::AmpOptions> amp;
  std::string path;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--verify") {
      verify = true;
    } else if (a.starts_with("--amp=")) {
      const std::string spec = a.substr(std::string_view("--amp=").size());
      const std::size_t colon = spec.find(':');
      amp = loom::passes::AmpOptions{};
      amp->level = loom::passes::amp_level_from_name(spec.substr(0, colon));
      if (colon != std::string::npos) {
        amp->dtype = loom::passes::amp_dtype_from_name(spec.substr(colon + 1));
      }
    } else if (a == "--dot") {
      dot = true;
    } else if (a == "--timing") {
      timing = true;
    } else if (a.starts_with("--passes=")) {
      if (pipeline) throw loom::ValueError("expected one --passes option, got also '" + a + "'");
      pipeline = a.substr(std::string_view("--passes=").size());
    } else if (a.starts_with("--pipeline=")) {
      if (pipeline) throw loom::ValueError("expected one --passes option, got also '" + a + "'");
      pipeline = loom::passes::pipeline(
          loom::passes::purpose_from_name(a.substr(std::string_view("--pipeline=").size())));
    } else if (a == "--save-graphs" || a.starts_with("--save-graphs=")) {
      if (save_graphs) throw loom::ValueError("expected one --save-graphs option, got another");
      if (a == "--save-graphs") {
        if (i + 1 == args.size() || args[i + 1].empty()) {
          throw loom::ValueError("expected a directory after --save-graphs, got none");
        }
        save_graphs = args[++i];
      } else {
        save_graphs = a.substr(std::string_view("--save-graphs=").size());
        if (save_graphs->empty()) {
          throw loom::ValueError("expected a directory after --save-graphs=, got none");
        }
      }
    } else if (a == "-h" || a == "--help") {
      std::cout << usage();
      return 0;
    } else if (a.size() > 1 && a[0] == '-') {
      // main() prefixes every message with "ir-opt: ".
      throw loom::ValueError(
          "expected an option of --verify, --amp=LEVEL[:DTYPE], --passes=LIST, --pipeline=NAME, --timing, --dot, "
          "--save-graphs DIR, "
          "got '" + a + "'");
    } else if (path.empty()) {
      path = a;
    } else {
      throw loom::ValueError("expected one input file, got '" + path + "' and '" + a + "'");
    }
  }
  // The pipeline is checked before the input is read, so a misspelled pass fails fast.
  loom::passes::PassManager passes;
  if (pipeline) passes = loom::passes::PassManager::parse(*pipeline);
  if (save_graphs) passes.set_save_graphs_dir(*save_graphs);
  if (path.empty()) throw loom::ValueError("expected an input file, got none");

  std::stringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw loom::FormatError(path + ": expected a readable file, got none");
    text << in.rdbuf();
  }
  auto module = loom::ir::parse_module(text.str(), path);
  if (verify) loom::ir::verify(*module);
  if (amp) {
    if (module->entry() == nullptr) throw loom::ValueError(path + ": expected an entry graph");
    loom::passes::infer_graph(module->entry());
    loom::passes::auto_mixed_precision(*module->entry(), *amp);
  }
  if (pipeline || save_graphs) {
    loom::passes::set_constant_evaluator(
        [](const loom::ir::Primitive& prim, const std::vector<loom::ir::Value>& args) {
          return loom::backend::run_op(prim, args);
        });
    passes.run(*module);
    if (timing) std::cerr << passes.timing_report();
  }
  std::cout << (dot ? loom::ir::to_dot(*module) : loom::ir::print_module(*module));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const loom::Error& e) {
    std::cerr << "ir-opt: " << e.what() << "\n";
    return 1;
  }
}
