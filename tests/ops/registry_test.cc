// Every registered op is complete: inference, a bprop rule or the reason it has none, a CPU
// kernel (float32, and float64 when differentiable), and at least one row in the op test table.
// The same test regenerates docs/ops.md (op × backend × differentiable) and fails when the
// checked-in copy was stale.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "backends/backend.h"
#include "backends/kernel.h"
#include "core/ir/error.h"
#include "core/ir/printer.h"
#include "ops/op.h"
#include "tests/ops/op_table.h"

namespace loom::testing {
namespace {

bool needs_kernel(const ops::OpDef& op) {
  return op.trait != ops::Trait::kStructural && op.trait != ops::Trait::kControlFlow &&
         !op.runtime_kernels;  // e.g. the communication ops: parallel::init() registers them
}

TEST(Registry, EveryOpIsComplete) {
  const auto& kernels = backend::cpu_backend().kernels();
  std::set<std::string> with_rows;
  for (const OpCase& c : all_cases()) with_rows.insert(c.op);
  for (const ops::OpDef* op : ops::Registry::global().all()) {
    SCOPED_TRACE(op->name);
    EXPECT_TRUE(op->infer) << "no inference";
    EXPECT_TRUE(op->bprop || !op->not_differentiable_because.empty()) << "no bprop and no reason";
    EXPECT_FALSE(op->summary.empty()) << "no summary";
    if (needs_kernel(*op)) {
      EXPECT_NE(kernels.find(op->name, DType::kFloat32), nullptr)
          << "no CPU Float32 kernel";
      if (op->bprop) {
        EXPECT_NE(kernels.find(op->name, DType::kFloat64), nullptr)
            << "differentiable but no CPU Float64 kernel";
      }
      EXPECT_TRUE(with_rows.count(op->name)) << "no row in the op test table";
    }
  }
}

// A differentiable op's gradient is checked by finite differences: it needs a table row that the
// gradient test runs (check_grad, a floating input marked differentiable).
TEST(Registry, EveryDifferentiableOpHasAGradientCheckRow) {
  std::set<std::string> checked;
  for (const OpCase& c : all_cases()) {
    if (!c.check_grad) continue;
    for (const InputSpec& in : c.inputs) {
      if (in.differentiable && is_floating(in.dtype)) checked.insert(c.op);
    }
  }
  for (const ops::OpDef* op : ops::Registry::global().all()) {
    if (!op->bprop || !needs_kernel(*op)) continue;
    EXPECT_TRUE(checked.count(op->name)) << op->name << " is differentiable but no table row "
                                         << "checks its gradient";
  }
}

// The facts kernels declare (backends/kernel.h, KernelDef) agree with the ops: a fusable op has a
// block functor in every floating CPU kernel and only fusable ops have one; an elementwise op's
// kernels may run in place and nothing else claims that blanket permission; in-place pairs name
// real inputs and outputs.
TEST(Registry, KernelFactsAgreeWithTheirOps) {
  const auto& kernels = backend::cpu_backend().kernels();
  for (const backend::KernelDef* k : kernels.all()) {
    SCOPED_TRACE(k->op + " " + std::string(dtype_name(k->dtype)));
    const ops::OpDef* op = ops::Registry::global().find(k->op);
    ASSERT_NE(op, nullptr) << "a kernel for an unregistered op";
    if (k->block) {
      EXPECT_TRUE(op->fusable) << "a block functor for an op the fuse pass never groups";
    }
    if (op->fusable && is_floating(k->dtype)) {
      EXPECT_NE(k->block, nullptr) << "fusable, but its kernel gives FusedElementwise no block";
    }
    EXPECT_EQ(k->elementwise_in_place, op->trait == ops::Trait::kElementwise)
        << "in-place elementwise kernels and elementwise ops must be the same set";
    for (auto [in, out] : k->in_place) {
      if (op->num_inputs >= 0) { EXPECT_LT(in, static_cast<std::size_t>(op->num_inputs)); }
      if (op->num_outputs >= 1) { EXPECT_LT(out, static_cast<std::size_t>(op->num_outputs)); }
    }
  }
  for (const ops::OpDef* op : ops::Registry::global().all()) {
    if (!op->fusable) continue;
    EXPECT_EQ(op->trait, ops::Trait::kElementwise) << op->name << " is fusable but not elementwise";
    for (DType d : {DType::kFloat32, DType::kFloat64}) {
      EXPECT_NE(kernels.find(op->name, d), nullptr) << op->name << " has no kernel to fuse";
    }
  }
}

// Each op's MindIR form (OpDef::mindir, read and written generically by mindir/) is consistent
// with the op: it names its own attributes, its input/output names fit its arity, each encoding
// suits its attribute's kind, and an op MindIR cannot carry says why and declares nothing else.
TEST(Registry, MindIRFormsAgreeWithTheirOps) {
  using E = ops::MindIRAttrEncoding;
  for (const ops::OpDef* op : ops::Registry::global().all()) {
    SCOPED_TRACE(op->name);
    const ops::MindIRForm& f = op->mindir;
    auto attr = [&](const std::string& name) -> const ops::AttrSpec* {
      for (const ops::AttrSpec& a : op->attrs) {
        if (a.name == name) return &a;
      }
      return nullptr;
    };
    if (op->trait == ops::Trait::kControlFlow) { EXPECT_FALSE(f.supported()); }
    if (!f.supported()) {
      EXPECT_TRUE(f.const_inputs.empty() && f.function_args.empty() && f.input_names.empty() &&
                  f.output_names.empty() && f.attrs.empty() && f.derived.empty())
          << "no MindIR form, but MindIR facts declared";
      continue;
    }
    for (const auto* list : {&f.const_inputs, &f.function_args}) {
      std::set<std::string> seen;
      for (const std::string& n : *list) {
        EXPECT_NE(attr(n), nullptr) << "'" << n << "' is not an attribute of the op";
        EXPECT_TRUE(seen.insert(n).second) << "'" << n << "' listed twice";
      }
    }
    for (const std::string& n : f.const_inputs) {
      EXPECT_NE(std::find(f.function_args.begin(), f.function_args.end(), n), f.function_args.end())
          << "const input '" << n << "' missing from the function form";
    }
    if (!f.const_inputs.empty()) { EXPECT_GE(op->num_inputs, 0); }
    EXPECT_EQ(f.input_names.empty(), f.output_names.empty());
    if (!f.input_names.empty() && op->num_inputs >= 0) {
      EXPECT_EQ(f.input_names.size(),
                static_cast<std::size_t>(op->num_inputs) + f.const_inputs.size());
      EXPECT_EQ(f.output_names.size(), static_cast<std::size_t>(std::max(op->num_outputs, 1)));
    }
    std::set<std::string> written;
    for (const ops::MindIRAttr& a : f.attrs) {
      const ops::AttrSpec* spec = attr(a.name);
      ASSERT_NE(spec, nullptr) << "encoding for '" << a.name << "', not an attribute";
      switch (a.encoding) {
        case E::kSpatialPair:
        case E::kSpatialQuad:
        case E::kPad4:
        case E::kAxisList:
        case E::kIntsFromTensor:
          EXPECT_EQ(spec->kind, ops::AttrKind::kInts) << a.name;
          break;
        case E::kPadModeLower:
        case E::kPadModeUpper:
        case E::kFormat:
          EXPECT_EQ(spec->kind, ops::AttrKind::kString) << a.name;
          break;
        case E::kAsIs:
          break;
      }
      if ((a.encoding == E::kSpatialPair || a.encoding == E::kSpatialQuad) && spec->default_value) {
        EXPECT_EQ(spec->default_value->as_ints().size(), 2u) << a.name;
      }
      if (a.encoding == E::kPad4 && spec->default_value) {
        EXPECT_EQ(spec->default_value->as_ints().size(), 4u) << a.name;
      }
      if (!a.also_written_as.empty()) {
        EXPECT_EQ(attr(a.also_written_as), nullptr) << a.also_written_as;
        EXPECT_TRUE(written.insert(a.also_written_as).second) << a.also_written_as;
      }
    }
    if (const ops::AttrSpec* fmt = attr("format")) {
      EXPECT_EQ(f.encoding("format"), E::kFormat);
      (void)fmt;
    }
    for (const ops::MindIRDerivedAttr& d : f.derived) {
      EXPECT_EQ(attr(d.name), nullptr) << d.name;
      EXPECT_FALSE(written.count(d.name)) << d.name;
      EXPECT_TRUE(static_cast<bool>(d.value)) << d.name;
    }
  }
}

TEST(Registry, EveryTableRowNamesARegisteredOp) {
  std::set<std::string> names;
  for (const OpCase& c : all_cases()) {
    EXPECT_NE(ops::Registry::global().find(c.op), nullptr) << c.name << ": " << c.op;
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate row name " << c.name;
  }
}

TEST(Registry, UnknownOpsAndAttributesAreClearErrors) {
  try {
    ops::make_op("NoSuchOp");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "ops: expected a registered op, got 'NoSuchOp'");
  }
  EXPECT_THROW(ops::make_op("MakeTuple", {{"bogus", ir::Value::i64(1)}}), ValueError);
}

std::string ops_markdown() {
  const auto& kernels = backend::cpu_backend().kernels();
  std::ostringstream md;
  md << "# Operators\n\n"
     << "Generated by `tests/ops/registry_test.cc` from the op registry; do not edit by hand.\n"
     << "CPU lists the dtypes with a CPU kernel; structural and control-flow ops have no kernel\n"
     << "(the runtimes handle them).\n\n"
     << "| op | inputs | attributes | differentiable | CPU | what it does |\n"
     << "|---|---|---|---|---|---|\n";
  for (const ops::OpDef* op : ops::Registry::global().all()) {
    std::string attrs;
    for (const ops::AttrSpec& a : op->attrs) {
      if (!attrs.empty()) attrs += ", ";
      attrs += a.name;
      if (a.default_value) {
        attrs += " = " + ir::print_value(*a.default_value);
      }
    }
    std::string cpu;
    for (DType d : kernels.dtypes(op->name)) {
      cpu += (cpu.empty() ? "" : ", ") + std::string(dtype_name(d));
    }
    const std::string inputs = op->num_inputs >= 0 ? std::to_string(op->num_inputs)
                                                   : std::to_string(op->min_inputs) + "+";
    md << "| " << op->name << " | " << inputs << " | " << attrs << " | "
       << (op->bprop ? "yes" : "no: " + op->not_differentiable_because) << " | "
       << (cpu.empty() ? "-" : cpu) << " | " << op->summary << " |\n";
  }
  return md.str();
}

// docs/ops.md is generated from the registry: the test writes the current text into the build
// tree and compares; it never rewrites the source tree.
TEST(Registry, DocsOpsMdIsCurrent) {
  const std::string path = std::string(LOOM_SOURCE_DIR) + "/docs/ops.md";
  const std::string generated = std::string(LOOM_BINARY_DIR) + "/docs/ops.md";
  const std::string expected = ops_markdown();
  std::filesystem::create_directories(std::string(LOOM_BINARY_DIR) + "/docs");
  std::ofstream(generated) << expected;
  std::ifstream in(path);
  std::stringstream current;
  current << in.rdbuf();
  EXPECT_EQ(current.str(), expected) << path << " is stale; the current text is in " << generated
                                     << " (cp " << generated << " " << path << ")";
}

// The products declare their FLOPs (OpDef::flops, the profiler's FLOP/s): 2 · |out| · K for the
// matrix products, 2 · |y or dout| · (C/group · kh · kw) for a convolution and its gradients,
// the same count forward and backward; the other ops declare none.
TEST(Registry, ProductsDeclareTheirFlops) {
  const auto& reg = loom::ops::Registry::global();
  auto flops = [&](const char* op, loom::ir::Primitive::Attrs attrs, std::vector<loom::Shape> in,
                   std::vector<loom::Shape> out) {
    const loom::ops::OpDef& def = reg.get(op);
    EXPECT_TRUE(def.flops) << op;
    return def.flops ? def.flops(*loom::ops::make_op(op, std::move(attrs)), in, out) : -1.0;
  };
  EXPECT_EQ(flops("MatMul", {}, {{2, 3}, {3, 4}}, {{2, 4}}), 48.0);
  EXPECT_EQ(flops("MatMul", {{"transpose_a", loom::ir::Value::boolean(true)}}, {{3, 2}, {3, 4}},
                  {{2, 4}}),
            48.0);
  EXPECT_EQ(flops("BatchMatMul", {}, {{5, 2, 3}, {5, 3, 4}}, {{5, 2, 4}}), 240.0);
  EXPECT_EQ(flops("MatMulBiasAct", {}, {{2, 3}, {3, 4}, {4}}, {{2, 4}}), 48.0);
  const loom::ir::Primitive::Attrs conv = {{"out_channel", loom::ir::Value::i64(3)},
                                     {"kernel_size", loom::ir::Value::ints({3, 3})}};
  EXPECT_EQ(flops("Conv2D", conv, {{1, 2, 5, 5}, {3, 2, 3, 3}}, {{1, 3, 3, 3}}), 972.0);
  EXPECT_EQ(flops("Conv2DBiasAct", conv, {{1, 2, 5, 5}, {3, 2, 3, 3}, {3}}, {{1, 3, 3, 3}}),
            972.0);
  loom::ir::Primitive::Attrs input = conv, filter = conv;
  input["input_size"] = loom::ir::Value::ints({1, 2, 5, 5});
  filter["filter_size"] = loom::ir::Value::ints({3, 2, 3, 3});
  EXPECT_EQ(flops("Conv2DBackpropInput", input, {{1, 3, 3, 3}, {3, 2, 3, 3}}, {{1, 2, 5, 5}}),
            972.0);
  EXPECT_EQ(flops("Conv2DBackpropFilter", filter, {{1, 3, 3, 3}, {1, 2, 5, 5}}, {{3, 2, 3, 3}}),
            972.0);
  for (const char* op : {"Add", "ReLU", "MaxPool", "BatchNorm", "Reshape"}) {
    EXPECT_FALSE(reg.get(op).flops) << op;
  }
}

}  // namespace
}  // namespace loom::testing
