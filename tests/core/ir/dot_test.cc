#include "core/ir/dot.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/ir/abstract.h"
#include "core/ir/anf.h"
#include "core/ir/value.h"

namespace loom::ir {
namespace {

// main calls helper, branches with If(@then, @else) and loops with While(@cond, @body).
struct ControlFlowModule {
  Module module;
  FuncGraph* main = nullptr;
  CNode* add = nullptr;
  CNode* call = nullptr;
  CNode* branch = nullptr;
  CNode* loop = nullptr;
  CNode* result = nullptr;

  ControlFlowModule() {
    main = module.add_graph("main");
    FuncGraph* helper = module.add_graph("helper");
    FuncGraph* then_g = module.add_graph("then");
    FuncGraph* else_g = module.add_graph("else");
    FuncGraph* cond = module.add_graph("cond");
    FuncGraph* body = module.add_graph("body");

    Parameter* a = helper->add_parameter("a");
    Parameter* n = helper->add_parameter("n");
    helper->set_output(helper->add_call(make_primitive("Mul"), {a, n}));
    then_g->set_output(then_g->add_parameter("a"));
    Parameter* e = else_g->add_parameter("a");
    else_g->set_output(else_g->add_call(make_primitive("Neg"), {e}));
    Parameter* c = cond->add_parameter("a");
    cond->set_output(cond->add_call(make_primitive("Less"), {c, cond->add_value(Value::f32(10))}));
    Parameter* b = body->add_parameter("a");
    body->set_output(body->add_call(make_primitive("Add"), {b, b}));

    Parameter* x = main->add_parameter("x", Abstract::tensor(DType::kFloat32, {2, 3}));
    Parameter* pred = main->add_parameter("c", Abstract::scalar(DType::kBool));
    Parameter* w = main->add_parameter("w");
    w->set_default(Tensor(DType::kFloat32, {2, 3}));
    add = main->add_call(make_primitive("Add"), {x, w});
    add->set_abstract(Abstract::tensor(DType::kFloat32, {2, 3}));
    call = main->add_call(helper, {add, main->add_value(Value::i64(3))});
    branch = main->add_call(make_primitive(std::string(kIfPrim)),
                            {pred, main->add_value(Value::graph(then_g)),
                             main->add_value(Value::graph(else_g)), call});
    loop = main->add_call(make_primitive(std::string(kWhilePrim)),
                          {main->add_value(Value::graph(cond)),
                           main->add_value(Value::graph(body)), branch});
    result = main->add_call(make_primitive("MakeTuple"),
                            {loop, main->add_value(Value::string("a<b&c"))});
    main->set_output(result);
    module.set_entry(main);
  }
};

std::string id(const Node* node) { return "node" + std::to_string(node->id()); }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool has_line(const std::string& text, const std::string& line) {
  for (const std::string& l : lines_of(text)) {
    if (l == line) return true;
  }
  return false;
}

// The cluster number of the graph labelled `name`, or -1.
int cluster_of(const std::string& dot, const std::string& name) {
  std::smatch m;
  const std::regex re("id=cluster_([0-9]+)\nlabel=\"" + name + "\"\n");
  return std::regex_search(dot, m, re) ? std::stoi(m[1]) : -1;
}

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) {
    ++n;
  }
  return n;
}

// Renders `dot_text` with Graphviz. A missing `dot` fails the test: graphviz is one of the
// packages scripts/setup.sh installs, so its absence is a broken setup, not a reason to skip.
void expect_renders(const std::string& dot_text, const std::string& name) {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) {
    FAIL() << "Graphviz `dot` not found on PATH (scripts/setup.sh installs graphviz)";
  }
  const auto path = std::filesystem::temp_directory_path() /
                    ("loom_dot_test_" + name + "_" + std::to_string(::getpid()) + ".dot");
  std::ofstream(path) << dot_text;
  const std::string command = "dot -Tsvg -o /dev/null '" + path.string() + "'";
  EXPECT_EQ(std::system(command.c_str()), 0) << "dot rejected:\n" << dot_text;
  std::filesystem::remove(path);
}

TEST(DotTest, EmptyModuleIsAnEmptyDigraph) {
  Module module;
  EXPECT_EQ(to_dot(module), "digraph loom {\ncompound=true\n}\n");
}

TEST(DotTest, OneClusterPerGraph) {
  ControlFlowModule m;
  const std::string dot = to_dot(m.module);
  EXPECT_EQ(dot.rfind("digraph loom {\ncompound=true\n", 0), 0u) << dot;
  EXPECT_EQ(count(dot, "subgraph cluster_"), 6) << dot;
  EXPECT_EQ(cluster_of(dot, "main"), 0) << dot;
  for (const char* name : {"helper", "then", "else", "cond", "body"}) {
    EXPECT_GT(cluster_of(dot, name), 0) << name << "\n" << dot;
  }
  // One parameters table and one Return per cluster.
  EXPECT_EQ(count(dot, "bgcolor='paleturquoise'"), 6);
  EXPECT_EQ(count(dot, ">Return</td>"), 6);
}

TEST(DotTest, DataEdgesGoFromSourceToInputPort) {
  ControlFlowModule m;
  const std::string dot = to_dot(m.module);
  EXPECT_TRUE(has_line(dot, "parameters_0:p0 -> " + id(m.add) + ":1[arrowhead=vee]")) << dot;
  EXPECT_TRUE(has_line(dot, "parameters_0:p2 -> " + id(m.add) + ":2[arrowhead=vee]")) << dot;
  EXPECT_TRUE(has_line(dot, id(m.add) + ":core -> " + id(m.call) + ":1[arrowhead=vee]")) << dot;
  EXPECT_TRUE(has_line(dot, "parameters_0:p1 -> " + id(m.branch) + ":1[arrowhead=vee]")) << dot;
  EXPECT_TRUE(has_line(dot, id(m.call) + ":core -> " + id(m.branch) + ":4[arrowhead=vee]")) << dot;
  EXPECT_TRUE(has_line(dot, id(m.branch) + ":core -> " + id(m.loop) + ":3[arrowhead=vee]")) << dot;
  EXPECT_TRUE(has_line(dot, id(m.result) + ":core -> return_0:1[arrowhead=vee]")) << dot;
  // A graph whose output is a parameter returns straight from the parameters table.
  const int then_k = cluster_of(dot, "then");
  EXPECT_TRUE(has_line(dot, "parameters_" + std::to_string(then_k) + ":p0 -> return_" +
                                std::to_string(then_k) + ":1[arrowhead=vee]"))
      << dot;
}

TEST(DotTest, CNodeIsATableWithPortsCalleeAndAbstract) {
  ControlFlowModule m;
  const std::string dot = to_dot(m.module);
  const std::regex add_node(
      id(m.add) +
      R"(\[shape=plaintext label=<<table port='core'[^>]*><tr><td port='1'>1</td>)"
      R"(<td port='2'>2</td></tr><tr><td colspan='2' bgcolor='cornsilk'>Add</td></tr>)"
      R"(<tr><td colspan='2'>&lt;Tensor\[Float32\], \(2, 3\)&gt;</td></tr></table>>\])");
  EXPECT_TRUE(std::regex_search(dot, add_node)) << dot;
  EXPECT_NE(dot.find("bgcolor='cornsilk'>@helper</td>"), std::string::npos) << dot;
  EXPECT_NE(dot.find("bgcolor='cornsilk'>If</td>"), std::string::npos) << dot;
  EXPECT_NE(dot.find("bgcolor='cornsilk'>While</td>"), std::string::npos) << dot;
  // The weight shows its shape in the parameters table.
  EXPECT_NE(dot.find("<td port='p2'>%w[2,3]</td>"), std::string::npos) << dot;
}

TEST(DotTest, GraphValuesPointIntoTheirClusters) {
  ControlFlowModule m;
  const std::string dot = to_dot(m.module);
  const auto edge_into = [&](const std::string& from, const std::string& graph) {
    const std::string k = std::to_string(cluster_of(dot, graph));
    return from + " -> parameters_" + k + "[color=blue dir=both arrowhead=dot lhead=cluster_" + k +
           "]";
  };
  EXPECT_TRUE(has_line(dot, edge_into(id(m.call) + ":core", "helper"))) << dot;
  const std::string then_oval = "const_" + id(m.branch) + "_2";
  const std::string else_oval = "const_" + id(m.branch) + "_3";
  EXPECT_TRUE(has_line(dot, edge_into(then_oval, "then"))) << dot;
  EXPECT_TRUE(has_line(dot, edge_into(else_oval, "else"))) << dot;
  EXPECT_TRUE(has_line(dot, edge_into("const_" + id(m.loop) + "_1", "cond"))) << dot;
  EXPECT_TRUE(has_line(dot, edge_into("const_" + id(m.loop) + "_2", "body"))) << dot;
  EXPECT_TRUE(has_line(dot, then_oval + "[shape=oval style=filled fillcolor=palegreen "
                                        "label=\"@then\" URL=\"#cluster_" +
                                std::to_string(cluster_of(dot, "then")) + "\"]"))
      << dot;
  EXPECT_TRUE(has_line(dot, then_oval + " -> " + id(m.branch) + ":2[arrowhead=vee]")) << dot;
  // Constants are lavender, one node per use.
  EXPECT_TRUE(has_line(dot, "const_" + id(m.call) +
                                "_2[shape=plaintext style=filled fillcolor=lavender "
                                "label=<I64(3)>]"))
      << dot;
}

TEST(DotTest, EscapesHtmlInLabels) {
  ControlFlowModule m;
  const std::string dot = to_dot(m.module);
  EXPECT_NE(dot.find("label=<&quot;a&lt;b&amp;c&quot;>"), std::string::npos) << dot;
  EXPECT_EQ(dot.find("a<b"), std::string::npos) << dot;
}

TEST(DotTest, LongConstantsAreTruncated) {
  Module module;
  FuncGraph* g = module.add_graph("g");
  g->set_output(g->add_call(make_primitive("Identity"),
                            {g->add_value(Value::string(std::string(200, 'x')))}));
  module.set_entry(g);
  const std::string dot = to_dot(module);
  EXPECT_EQ(dot.find(std::string(60, 'x')), std::string::npos) << dot;
  EXPECT_NE(dot.find("...>]"), std::string::npos) << dot;
}

TEST(DotTest, IsDeterministic) {
  ControlFlowModule a;
  ControlFlowModule b;
  const std::string dot = to_dot(a.module);
  EXPECT_EQ(dot, to_dot(a.module));
  EXPECT_EQ(dot, to_dot(b.module));
  EXPECT_FALSE(std::regex_search(dot, std::regex("0x[0-9a-fA-F]{6,}"))) << dot;
}

TEST(DotTest, RootGraphDrawsOnlyWhatItReaches) {
  ControlFlowModule m;
  const std::string dot = to_dot(*m.module.find_graph("else"));
  EXPECT_EQ(count(dot, "subgraph cluster_"), 1) << dot;
  EXPECT_EQ(cluster_of(dot, "else"), 0) << dot;
}

TEST(DotTest, RendersWithGraphviz) {
  ControlFlowModule m;
  expect_renders(to_dot(m.module), "control_flow");
}

// Names and strings Graphviz would choke on if passed through raw, a zero-argument call, a graph
// calling itself and a graph with no parameters.
TEST(DotTest, RendersHostileNames) {
  Module module;
  FuncGraph* g = module.add_graph("✓main \"quoted\" \\N <b>");
  FuncGraph* empty = module.add_graph("empty");
  empty->set_output(empty->add_call(make_primitive("Zeros<&>"), {}));
  Parameter* x = g->add_parameter("x<'\">&");
  CNode* self = g->add_call(g, {x});
  CNode* other = g->add_call(empty, {});
  std::string bad_bytes = "ctl\x01\x1f bad\xff\xc3 utf8 ok \xc3\xa9";
  g->set_output(g->add_call(make_primitive("MakeTuple"),
                            {self, other, g->add_value(Value::string(bad_bytes)),
                             g->add_value(Value::graph(g))}));
  module.set_entry(g);
  const std::string dot = to_dot(module);
  EXPECT_NE(dot.find("label=\"✓main \\\"quoted\\\" \\\\N <b>\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("\\x01"), std::string::npos) << dot;
  EXPECT_NE(dot.find("é"), std::string::npos) << dot;
  EXPECT_EQ(dot.find('\x01'), std::string::npos);
  // A call of its own graph keeps the blue edge but cannot name its own cluster as lhead.
  EXPECT_TRUE(has_line(dot, id(self) + ":core -> parameters_0[color=blue dir=both arrowhead=dot]"))
      << dot;
  expect_renders(dot, "hostile");
}

}  // namespace
}  // namespace loom::ir
