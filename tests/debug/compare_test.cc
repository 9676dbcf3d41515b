// Two dumps compared (debug/compare.h): every measure against numbers worked out by hand from its
// definition, msprobe's pass rule at its thresholds, NaN/Inf, zero and one-element tensors, and
// compare_dumps over synthetic dumps: identical dumps pass bitwise, a perturbed tensor fails and
// the first failure follows A's execution order, NaN, shape and dtype differences, unmatched
// tensors, the mapping file, the CSV, and bad input named in the error.
#include "debug/compare.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>

#include "core/ir/error.h"
#include "tests/debug/dump_reader_test_util.h"

namespace loom::debug {
namespace {

namespace fs = std::filesystem;
using testing::DumpWriter;
using testing::TempDir;
using testing::f32;
using testing::f64;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no error";
}

TEST(CompareValues, OrthogonalVectors) {
  const TensorMetrics m = compare_values({1, 0}, {0, 1});
  EXPECT_EQ(m.cosine, 0.0);
  EXPECT_DOUBLE_EQ(m.euc_dist, std::sqrt(2.0));
  EXPECT_EQ(m.max_abs_err, 1.0);
  EXPECT_EQ(m.mean_abs_err, 1.0);
  EXPECT_EQ(m.rmse, 1.0);
  EXPECT_DOUBLE_EQ(m.relative_euc_dist, std::sqrt(2.0));
  // b = 0 in the first element: msprobe puts 2^-52 on both sides: ((1 + e) - e) / e = 2^52.
  EXPECT_EQ(m.max_relative_err, 4503599627370496.0);
  EXPECT_EQ(m.one_thousandth_err_ratio, 0.0);
  EXPECT_EQ(m.five_thousandths_err_ratio, 0.0);
  // KL: p = [1, e] / (1 + e), q = [e, 1] / (1 + e) with e = 2^-23, so
  // KL = (1 - e) / (1 + e) * log(1 / e) = (1 - e) / (1 + e) * 23 log 2.
  const double e = FLT_EPSILON;
  EXPECT_NEAR(m.kl_divergence, (1 - e) / (1 + e) * 23 * std::log(2.0), 1e-12);
  EXPECT_EQ(m.message, "");
  EXPECT_EQ(accuracy_of(m, 2), Accuracy::kNo);  // Cosine 0 < 0.9
}

TEST(CompareValues, SmallVectors) {
  const TensorMetrics m = compare_values({1, 2, 3}, {1, 2, 4});
  EXPECT_DOUBLE_EQ(m.cosine, 17 / std::sqrt(14.0 * 21.0));  // 0.99146...
  EXPECT_EQ(m.euc_dist, 1.0);
  EXPECT_EQ(m.max_abs_err, 1.0);
  EXPECT_EQ(m.max_relative_err, 0.25);
  EXPECT_DOUBLE_EQ(m.one_thousandth_err_ratio, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.five_thousandths_err_ratio, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.mean_abs_err, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.rmse, std::sqrt(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(m.relative_euc_dist, 1 / std::sqrt(21.0));
  // KL: min-max scaled p = [0, 1/2, 1] and q = [0, 1/3, 1], zeros floored at e = 2^-23,
  // normalized by S = 3/2 + e and T = 4/3 + e.
  const double e = FLT_EPSILON, S = 1.5 + e, T = 4.0 / 3.0 + e;
  const double kl = e / S * std::log(T / S) + 0.5 / S * std::log((0.5 / S) / ((1.0 / 3.0) / T)) +
                    1 / S * std::log(T / S);
  EXPECT_NEAR(m.kl_divergence, kl, 1e-14);
  // Cosine 0.991 >= 0.99 and MaxAbsErr 1 is not above 1: msprobe says Yes.
  EXPECT_EQ(accuracy_of(m, 3), Accuracy::kYes);
}

TEST(CompareValues, EqualValuesGiveCosineOneExactly) {
  const std::vector<double> v = {0.1f, -2.5f, 3.3f, 1e-3f, 7.0f};
  const TensorMetrics m = compare_values(v, v);
  EXPECT_EQ(m.cosine, 1.0);
  EXPECT_EQ(m.euc_dist, 0.0);
  EXPECT_EQ(m.max_abs_err, 0.0);
  EXPECT_EQ(m.max_relative_err, 0.0);
  EXPECT_EQ(m.one_thousandth_err_ratio, 1.0);
  EXPECT_EQ(m.five_thousandths_err_ratio, 1.0);
  EXPECT_EQ(m.rmse, 0.0);
  EXPECT_EQ(m.relative_euc_dist, 0.0);
  EXPECT_EQ(m.kl_divergence, 0.0);
  EXPECT_EQ(accuracy_of(m, 5), Accuracy::kYes);
}

TEST(CompareValues, ZeroInBenchUsesMsprobesEpsilon) {
  const TensorMetrics m = compare_values({0.5, 0}, {0, 0});
  EXPECT_TRUE(std::isnan(m.cosine));
  EXPECT_EQ(m.message, "all the data is zero in B: no cosine");
  EXPECT_EQ(m.max_relative_err, 2251799813685248.0);  // 0.5 / 2^-52 = 2^51
  EXPECT_EQ(m.one_thousandth_err_ratio, 0.5);         // 0 vs 0 has relative error 0
  EXPECT_EQ(m.relative_euc_dist, kInf);
  EXPECT_EQ(accuracy_of(m, 2), Accuracy::kNo);  // no cosine, MaxAbsErr 0.5 > 0.001
}

TEST(CompareValues, NaNAndInfAtTheSamePlacesCompareAsZero) {
  const TensorMetrics m = compare_values({kNaN, 1, kInf, -kInf}, {kNaN, 1, kInf, -kInf});
  EXPECT_FALSE(m.nonfinite_mismatch);
  EXPECT_EQ(m.nonfinite, 3);
  EXPECT_EQ(m.cosine, 1.0);
  EXPECT_EQ(m.max_abs_err, 0.0);
  EXPECT_EQ(m.message, "3 NaN/Inf values at the same positions on both sides, compared as 0");
  EXPECT_EQ(accuracy_of(m, 4), Accuracy::kYes);
}

TEST(CompareValues, NaNAndInfElsewhereAreNA) {
  const TensorMetrics m = compare_values({1, 1, 2}, {kNaN, 1, 2});
  EXPECT_TRUE(m.nonfinite_mismatch);
  for (double v : {m.cosine, m.euc_dist, m.max_abs_err, m.max_relative_err,
                   m.one_thousandth_err_ratio, m.five_thousandths_err_ratio, m.mean_abs_err,
                   m.rmse, m.relative_euc_dist, m.kl_divergence}) {
    EXPECT_TRUE(std::isnan(v));
  }
  EXPECT_EQ(m.message, "NaN/Inf at different positions (A: 0 NaN, 0 Inf; B: 1 NaN, 0 Inf)");
  EXPECT_EQ(accuracy_of(m, 3), Accuracy::kNo);
  // +Inf against -Inf at one place is a difference (msprobe would equate them).
  const TensorMetrics s = compare_values({kInf, 1}, {-kInf, 1});
  EXPECT_TRUE(s.nonfinite_mismatch);
  EXPECT_EQ(s.message, "NaN/Inf at different positions (A: 0 NaN, 1 Inf; B: 0 NaN, 1 Inf)");
}

TEST(CompareValues, ZeroAndOneElementTensorsHaveNoCosine) {
  const TensorMetrics zeros = compare_values({0, 0}, {0, 0});
  EXPECT_EQ(zeros.cosine, 1.0);  // msprobe: both norms zero
  EXPECT_EQ(accuracy_of(zeros, 2), Accuracy::kYes);
  const TensorMetrics near = compare_values({0, 0}, {0, 0.0005});
  EXPECT_TRUE(std::isnan(near.cosine));
  EXPECT_EQ(near.message, "all the data is zero in A: no cosine");
  EXPECT_EQ(accuracy_of(near, 2), Accuracy::kYes);  // MaxAbsErr 0.0005 <= 0.001
  EXPECT_EQ(accuracy_of(compare_values({0, 0}, {0, 0.002}), 2), Accuracy::kNo);
  const TensorMetrics one = compare_values({2}, {2.0005});
  EXPECT_TRUE(std::isnan(one.cosine));
  EXPECT_EQ(one.message, "one element: no cosine");
  EXPECT_EQ(accuracy_of(one, 1), Accuracy::kYes);
  EXPECT_EQ(accuracy_of(compare_values({2}, {2.01}), 1), Accuracy::kNo);
  const TensorMetrics empty = compare_values({}, {});
  EXPECT_EQ(empty.message, "empty tensors: nothing to compare");
  EXPECT_EQ(accuracy_of(empty, 0), Accuracy::kYes);
  EXPECT_EQ(error_of([] { compare_values({1}, {1, 2}); }),
            "compare_values: expected as many values on both sides, got 1 and 2");
}

TEST(CompareValues, MsprobesPassRuleAtItsThresholds) {
  auto rule = [](double cosine, double max_abs_err) {
    TensorMetrics m;
    m.cosine = cosine;
    m.max_abs_err = max_abs_err;
    return accuracy_name(accuracy_of(m, 10));
  };
  EXPECT_STREQ(rule(0.98, 0.001), "Yes");   // cosine < 0.99 but MaxAbsErr not > 0.001
  EXPECT_STREQ(rule(0.98, 0.0011), "No");   // both
  EXPECT_STREQ(rule(0.99, 0.5), "Yes");     // cosine not < 0.99
  EXPECT_STREQ(rule(0.89, 0.0001), "No");   // cosine < 0.9
  EXPECT_STREQ(rule(0.9, 0.0001), "Yes");
  EXPECT_STREQ(rule(1.0, 1.0), "Yes");      // MaxAbsErr not > 1
  EXPECT_STREQ(rule(1.0, 1.01), "No");
  EXPECT_STREQ(rule(kNaN, 0.001), "Yes");   // no cosine: MaxAbsErr alone
  EXPECT_STREQ(rule(kNaN, 0.0011), "No");
  EXPECT_STREQ(accuracy_name(Accuracy::kUnmatched), "Unmatched");
}

TEST(CompareValues, SideStats) {
  const SideStats s = side_stats({1, -2, 3});
  EXPECT_EQ(s.max, 3.0);
  EXPECT_EQ(s.min, -2.0);
  EXPECT_DOUBLE_EQ(s.mean, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(s.l2norm, std::sqrt(14.0));
  EXPECT_TRUE(std::isnan(side_stats({1, kNaN}).max));
  EXPECT_TRUE(std::isnan(side_stats({}).mean));
}

constexpr char kOrder[] =
    "index,op_type,op_name,full_name,scope,file,line,role,forward,depth,graph\n"
    "0,MatMul,MatMul-op0,Net/fc/MatMul-op0,Net/fc/MatMul,net.py,3,forward,,0,train_step\n"
    "1,ReLU,ReLU-op1,Net/relu/ReLU-op1,Net/relu/ReLU,net.py,4,forward,,0,train_step\n"
    "2,MatMulGrad,MatMulGrad-op2,Gradients/Net/fc/MatMulGrad-op2,Gradients/Net/fc/MatMulGrad,"
    "net.py,3,backward,Net/fc/MatMul,0,train_step\n";

// What each tensor of the small dump holds; a test changes some before writing B.
struct Values {
  Tensor param = f32({2, 2}, {1, 2, 3, 4});
  Tensor matmul_in = f32({2, 2}, {1, 0, 0, 1});
  Tensor matmul_out = f32({2, 2}, {1, 2, 3, 4});
  Tensor relu = f32({4}, {0, 1, 2, 3});
  Tensor grad_op = f32({4}, {1, 1, 1, 1});
  Tensor gradient = f32({2, 2}, {0.5f, 0.5f, 0.5f, 0.5f});
  Tensor relu_iter1 = f32({4}, {4, 5, 6, 7});
};

// Graph 0, iterations 0 and 1. MatMulGrad-op2's file has an earlier timestamp than ReLU-op1's,
// so the order of the rows (MatMul, ReLU, MatMulGrad) comes from the execution-order file.
void write_dump(const fs::path& root, const Values& v, std::int64_t ts0) {
  const DumpWriter w(root);
  w.tensor(0, 0, "Parameter", "w", ts0 + 10, "output", 0, v.param);
  w.tensor(0, 0, "MatMul", "MatMul-op0", ts0 + 20, "input", 0, v.matmul_in);
  w.tensor(0, 0, "MatMul", "MatMul-op0", ts0 + 21, "output", 0, v.matmul_out);
  w.tensor(0, 0, "MatMulGrad", "MatMulGrad-op2", ts0 + 25, "output", 0, v.grad_op);
  w.tensor(0, 0, "ReLU", "ReLU-op1", ts0 + 30, "output", 0, v.relu);
  w.tensor(0, 0, "Gradient", "w", ts0 + 40, "output", 0, v.gradient);
  w.tensor(0, 1, "ReLU", "ReLU-op1", ts0 + 5, "output", 0, v.relu_iter1);
  w.execution_order(0, kOrder);
}

std::vector<std::string> names(const CompareResult& r) {
  std::vector<std::string> out;
  for (const CompareRow& row : r.rows) {
    out.push_back(std::to_string(row.a.iteration) + ":" + row.a_name());
  }
  return out;
}

TEST(CompareDumps, IdenticalDumpsPassBitwiseInExecutionOrder) {
  TempDir a, b;
  write_dump(a.path(), {}, 1000);
  write_dump(b.path(), {}, 5000);  // other timestamps: they are not part of the match
  const CompareResult r = compare_dumps(open_dump(a.str()), open_dump(b.str()));
  EXPECT_EQ(names(r), (std::vector<std::string>{
                          "0:Parameter.w.output.0", "0:MatMul-op0.input.0",
                          "0:MatMul-op0.output.0", "0:ReLU-op1.output.0",
                          "0:MatMulGrad-op2.output.0", "0:Gradient.w.output.0",
                          "1:ReLU-op1.output.0"}));
  for (const CompareRow& row : r.rows) {
    EXPECT_TRUE(row.passed()) << row.a_name();
    EXPECT_EQ(row.metrics.cosine, 1.0) << row.a_name();
    EXPECT_EQ(row.metrics.max_abs_err, 0.0) << row.a_name();
    EXPECT_EQ(row.message, "") << row.a_name();
  }
  EXPECT_EQ(r.first_failure(), nullptr);
  EXPECT_EQ(summary_line(r), "compared 7 tensors: 7 passed, 0 failed; 0 only in A, 0 only in B");
  ASSERT_TRUE(r.rows[3].node);
  EXPECT_EQ(r.rows[3].node->full_name, "Net/relu/ReLU-op1");
  EXPECT_FALSE(r.rows[0].node);  // a Parameter file has no execution-order row
}

TEST(CompareDumps, TheFirstFailureFollowsAsExecutionOrder) {
  TempDir a, b;
  write_dump(a.path(), {}, 1000);
  Values v;
  v.relu = f32({4}, {0, 1, 2, 5});           // MaxAbsErr 2 > 1
  v.grad_op = f32({4}, {-1, -1, -1, -1});    // Cosine -1, written before ReLU-op1
  v.relu_iter1 = f32({4}, {4, 5, 6, 9});     // a later iteration
  write_dump(b.path(), v, 1000);
  const CompareResult r = compare_dumps(open_dump(a.str()), open_dump(b.str()));
  EXPECT_EQ(r.failed(), 3);
  const CompareRow* f = r.first_failure();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->a_name(), "ReLU-op1.output.0");
  EXPECT_EQ(f->a.iteration, 0);
  EXPECT_EQ(f->metrics.max_abs_err, 2.0);
  EXPECT_EQ(f->accuracy, Accuracy::kNo);
  EXPECT_EQ(describe_node(*f), "ReLU ReLU-op1, full name Net/relu/ReLU-op1, net.py:4, forward");
  const CompareRow& grad = r.rows[4];
  EXPECT_EQ(grad.a_name(), "MatMulGrad-op2.output.0");
  EXPECT_EQ(grad.metrics.cosine, -1.0);
  EXPECT_EQ(describe_node(grad),
            "MatMulGrad MatMulGrad-op2, full name Gradients/Net/fc/MatMulGrad-op2, net.py:3, "
            "backward of Net/fc/MatMul");
  EXPECT_EQ(describe_node(r.rows[0]),
            "Parameter w (the graph parameter as the run received it)");
  EXPECT_EQ(describe_node(r.rows[5]),
            "Gradient w (the step's gradient of parameter w)");
  EXPECT_EQ(summary_line(r), "compared 7 tensors: 4 passed, 3 failed; 0 only in A, 0 only in B");
}

TEST(CompareDumps, ANaNTensorFailsAsNA) {
  TempDir a, b;
  write_dump(a.path(), {}, 1000);
  Values v;
  v.matmul_out = f32({2, 2}, {1, 2, std::nanf(""), 4});
  write_dump(b.path(), v, 1000);
  const CompareResult r = compare_dumps(open_dump(a.str()), open_dump(b.str()));
  const CompareRow* f = r.first_failure();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->a_name(), "MatMul-op0.output.0");
  EXPECT_EQ(f->accuracy, Accuracy::kNo);
  EXPECT_TRUE(std::isnan(f->metrics.cosine));
  EXPECT_EQ(f->message, "NaN/Inf at different positions (A: 0 NaN, 0 Inf; B: 1 NaN, 0 Inf)");
  EXPECT_TRUE(std::isnan(f->b_stats.max));
  EXPECT_EQ(f->a_stats.max, 4.0);
  EXPECT_EQ(r.failed(), 1);
}

TEST(CompareDumps, ShapeMismatchFailsAsUnmatched) {
  TempDir a, b;
  write_dump(a.path(), {}, 1000);
  Values v;
  v.matmul_out = f32({4}, {1, 2, 3, 4});
  write_dump(b.path(), v, 1000);
  const CompareResult r = compare_dumps(open_dump(a.str()), open_dump(b.str()));
  const CompareRow* f = r.first_failure();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->a_name(), "MatMul-op0.output.0");
  EXPECT_EQ(f->accuracy, Accuracy::kUnmatched);
  EXPECT_EQ(f->message, "shape (2, 2) vs (4)");
  EXPECT_EQ(r.failed(), 1);
}

TEST(CompareDumps, Float32AgainstAFloat64ReferencePassesWithinRounding) {
  TempDir a, b;
  const std::vector<double> exact = {0.1, -0.7, 1.3, 2.9};
  std::vector<float> rounded;
  double max_err = 0;
  for (double x : exact) {
    rounded.push_back(static_cast<float>(x));
    max_err = std::max(max_err, std::fabs(static_cast<double>(static_cast<float>(x)) - x));
  }
  Values va, vb;
  va.relu = f32({4}, rounded);
  vb.relu = f64({4}, exact);
  write_dump(a.path(), va, 1000);
  write_dump(b.path(), vb, 1000);
  const CompareResult r = compare_dumps(open_dump(a.str()), open_dump(b.str()));
  EXPECT_EQ(r.failed(), 0);
  const CompareRow& row = r.rows[3];
  EXPECT_EQ(row.a_name(), "ReLU-op1.output.0");
  EXPECT_EQ(row.a_dtype, "Float32");
  EXPECT_EQ(row.b_dtype, "Float64");
  EXPECT_EQ(row.message, "dtype Float32 vs Float64");
  EXPECT_EQ(row.metrics.max_abs_err, max_err);
  EXPECT_GT(max_err, 0.0);
  EXPECT_LT(max_err, 1e-7);
  EXPECT_EQ(row.metrics.one_thousandth_err_ratio, 1.0);
}

TEST(CompareDumps, UnmatchedTensorsAreListedNotFailed) {
  TempDir a, b;
  write_dump(a.path(), {}, 1000);
  write_dump(b.path(), {}, 1000);
  DumpWriter(a.path()).tensor(0, 0, "Add", "Add-op9", 2000, "output", 0, f32({1}, {1}));
  DumpWriter(b.path()).tensor(0, 1, "Sub", "Sub-op8", 2000, "output", 0, f32({1}, {1}));
  const CompareResult r = compare_dumps(open_dump(a.str()), open_dump(b.str()));
  ASSERT_EQ(r.only_in_a.size(), 1u);
  EXPECT_EQ(r.only_in_a[0].key(), "Add-op9.output.0");
  ASSERT_EQ(r.only_in_b.size(), 1u);
  EXPECT_EQ(r.only_in_b[0].key(), "Sub-op8.output.0");
  EXPECT_EQ(summary_line(r), "compared 7 tensors: 7 passed, 0 failed; 1 only in A, 1 only in B");
}

TEST(CompareDumps, GraphAndIterationFilters) {
  TempDir a, b;
  write_dump(a.path(), {}, 1000);
  write_dump(b.path(), {}, 1000);
  CompareOptions o;
  o.graph = 0;
  o.iteration = 1;
  const CompareResult r = compare_dumps(open_dump(a.str()), open_dump(b.str()), o);
  EXPECT_EQ(names(r), std::vector<std::string>{"1:ReLU-op1.output.0"});
  EXPECT_TRUE(r.only_in_a.empty());
  o.graph = 3;
  EXPECT_EQ(error_of([&] { compare_dumps(open_dump(a.str()), open_dump(b.str()), o); }),
            "compare: expected tensors in common between A '" + a.str() + "' (no tensors) and B '" +
                b.str() + "' (no tensors), got none (tensors match by graph, iteration and name; "
                "a reference with other names needs a mapping file); only --graph/--iteration "
                "selected tensors");
}

TEST(CompareDumps, NothingInCommonIsAnError) {
  TempDir a, b;
  DumpWriter(a.path()).tensor(0, 0, "ReLU", "ReLU-op0", 1, "output", 0, f32({1}, {1}));
  DumpWriter(b.path()).tensor(5, 2, "ReLU", "ReLU-op0", 1, "output", 0, f32({1}, {1}));
  DumpWriter(b.path()).tensor(5, 3, "ReLU", "ReLU-op0", 1, "output", 0, f32({1}, {1}));
  EXPECT_EQ(error_of([&] { compare_dumps(open_dump(a.str()), open_dump(b.str())); }),
            "compare: expected tensors in common between A '" + a.str() +
                "' (1 tensor in graph 0, iteration 0, e.g. ReLU-op0.output.0) and B '" + b.str() +
                "' (2 tensors in graph 5, iterations 2..3, e.g. ReLU-op0.output.0, "
                "ReLU-op0.output.0), got none (tensors match by graph, iteration and name; a "
                "reference with other names needs a mapping file)");
}

TEST(CompareDumps, RepeatedNamesMatchOccurrenceByOccurrence) {
  TempDir a, b;
  const DumpWriter wa(a.path()), wb(b.path());
  wa.tensor(0, 0, "ReLU", "ReLU-op0", 1, "output", 0, f32({2}, {1, 2}));
  wa.tensor(0, 0, "ReLU", "ReLU-op0", 2, "output", 0, f32({2}, {3, 4}));
  wb.tensor(0, 0, "ReLU", "ReLU-op0", 7, "output", 0, f32({2}, {1, 2}));
  wb.tensor(0, 0, "ReLU", "ReLU-op0", 8, "output", 0, f32({2}, {3, 9}));
  const CompareResult r = compare_dumps(open_dump(a.str()), open_dump(b.str()));
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.rows[0].a_name(), "ReLU-op0.output.0");
  EXPECT_TRUE(r.rows[0].passed());
  EXPECT_EQ(r.rows[1].a_name(), "ReLU-op0.output.0#2");
  EXPECT_EQ(r.rows[1].metrics.max_abs_err, 5.0);
  EXPECT_FALSE(r.rows[1].passed());
  EXPECT_EQ(describe_node(r.rows[1]),
            "ReLU ReLU-op0 (no row for it in A's execution order of graph 0)");
}

TEST(CompareDumps, AMappingMatchesForeignNames) {
  TempDir a, b;
  write_dump(a.path(), {}, 1000);
  const DumpWriter wb(b.path(), 0, "torch");
  const Values v;
  wb.tensor(0, 0, "Linear", "fc", 3, "output", 0, v.matmul_out);
  wb.tensor(0, 0, "Relu", "relu", 4, "output", 0, f32({4}, {0, 1, 2, 4}));
  wb.tensor(0, 0, "Extra", "extra", 5, "output", 0, f32({1}, {0}));
  CompareOptions o;
  o.mapping = parse_mapping(R"({"fc.output.0": "MatMul-op0.output.0",
                                "relu.output.0": "ReLU-op1.output.0",
                                "ghost.output.0": "MatMulGrad-op2.output.0"})",
                            "map.json");
  const CompareResult r = compare_dumps(open_dump(a.str()), open_dump(b.str()), o);
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.rows[0].a_name(), "MatMul-op0.output.0");
  EXPECT_EQ(r.rows[0].b_name(), "fc.output.0");
  EXPECT_TRUE(r.rows[0].passed());
  EXPECT_EQ(r.rows[1].a_name(), "ReLU-op1.output.0");
  EXPECT_EQ(r.rows[1].b_name(), "relu.output.0");
  EXPECT_EQ(r.rows[1].metrics.max_abs_err, 1.0);
  ASSERT_EQ(r.not_mapped.size(), 1u);
  EXPECT_EQ(r.not_mapped[0].key(), "extra.output.0");
  EXPECT_EQ(r.unused_mappings, std::vector<std::string>{"ghost.output.0"});
  EXPECT_EQ(summary_line(r),
            "compared 2 tensors: 2 passed, 0 failed; 5 only in A, 0 only in B, 1 of B not mapped");
}

TEST(CompareDumps, MalformedMappingsNameTheFile) {
  EXPECT_EQ(error_of([] { parse_mapping("[1]", "m.json"); }),
            "m.json: expected a JSON object {\"<B key>\": \"<A key>\", ...}, got array");
  const std::string invalid = error_of([] { parse_mapping("{\"a\": ", "m.json"); });
  EXPECT_EQ(invalid.rfind("m.json: expected a JSON object {\"<B key>\": \"<A key>\", ...}, got "
                          "invalid JSON (",
                          0),
            0u)
      << invalid;
  const std::string overflow = error_of([] { parse_mapping("{\"a\": 1e800}", "m.json"); });
  EXPECT_EQ(overflow.rfind("m.json: expected a JSON object {\"<B key>\": \"<A key>\", ...}, got "
                           "invalid JSON ([json.exception.out_of_range.406] number overflow",
                           0),
            0u)
      << overflow;
  EXPECT_EQ(error_of([] { parse_mapping("{\"a\": 1}", "m.json"); }),
            "m.json: \"a\": expected an A key (a string such as \"Conv2D-op0.output.0\"), got "
            "number 1");
  EXPECT_EQ(error_of([] { parse_mapping("{}", "m.json"); }),
            "m.json: expected at least one entry {\"<B key>\": \"<A key>\"}, got an empty object");
  EXPECT_EQ(error_of([] { parse_mapping(R"({"a": "x", "b": "x"})", "m.json"); }),
            "m.json: expected each A key once, got \"a\" and \"b\" both mapped to \"x\"");
  TempDir tmp;
  const std::string missing = (tmp.path() / "none.json").string();
  EXPECT_EQ(error_of([&] { load_mapping(missing); }),
            missing + ": expected a readable mapping file, got none");
  testing::write_text(tmp.path() / "m.json", R"({"x.output.0": "ReLU-op0.output.0"})");
  EXPECT_EQ(load_mapping((tmp.path() / "m.json").string()),
            (std::map<std::string, std::string>{{"x.output.0", "ReLU-op0.output.0"}}));
}

TEST(CompareDumps, ACorruptTensorFileIsAnErrorNamingIt) {
  TempDir a, b;
  write_dump(a.path(), {}, 1000);
  write_dump(b.path(), {}, 1000);
  const DumpDir db = open_dump(b.str());
  const std::string file = db.tensors[2].path;  // MatMul-op0.output.0
  fs::resize_file(file, fs::file_size(file) - 10);  // cut off while writing
  const std::string m = error_of([&] { compare_dumps(open_dump(a.str()), db); });
  EXPECT_EQ(m, file + ": expected 16 bytes of data for Float32 (2, 2), got 6");
}

TEST(CompareDumps, TheCsvHasMsprobesColumns) {
  TempDir a, b;
  write_dump(a.path(), {}, 1000);
  Values v;
  v.relu = f32({4}, {0, 1, 2, 5});
  write_dump(b.path(), v, 1000);
  const CompareResult r = compare_dumps(open_dump(a.str()), open_dump(b.str()));
  const std::string csv = compare_csv(r);
  const std::string header =
      "NPU Name,Bench Name,NPU Dtype,Bench Dtype,NPU Tensor Shape,Bench Tensor Shape,Cosine,"
      "EucDist,MaxAbsErr,MaxRelativeErr,One Thousandth Err Ratio,Five Thousandths Err Ratio,"
      "NPU max,NPU min,NPU mean,NPU l2norm,Bench max,Bench min,Bench mean,Bench l2norm,"
      "Accuracy Reached or Not,Err_message,MeanAbsErr,RMSE,RelativeEucDist,KLDivergence,"
      "Op Type,Cell,File,Line,Role,Forward,Full Name,Graph,Iteration,NPU File,Bench File\r\n";
  ASSERT_EQ(csv.substr(0, header.size()), header);
  std::vector<std::string> lines;
  for (std::size_t at = 0; at < csv.size();) {
    const std::size_t end = csv.find("\r\n", at);
    lines.push_back(csv.substr(at, end - at));
    at = end + 2;
  }
  ASSERT_EQ(lines.size(), 8u);  // the header and 7 rows
  const DumpDir da = open_dump(a.str()), db = open_dump(b.str());
  EXPECT_EQ(lines[1],
            "Parameter.w.output.0,Parameter.w.output.0,Float32,Float32,\"[2, 2]\",\"[2, 2]\",1,0,"
            "0,0,1,1,4,1,2.5,5.477225575051661,4,1,2.5,5.477225575051661,Yes,,0,0,0,0,Parameter,"
            ",,,,,,0,0," + da.tensors[0].path + "," + db.tensors[0].path);
  // ReLU-op1: [0, 1, 2, 3] against [0, 1, 2, 5] (no field needs quotes).
  std::vector<std::string> f;
  for (std::size_t at = 0;;) {
    const std::size_t comma = lines[4].find(',', at);
    f.push_back(lines[4].substr(at, comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  ASSERT_EQ(f.size(), compare_csv_columns().size());
  EXPECT_EQ(std::vector<std::string>(f.begin(), f.begin() + 6),
            (std::vector<std::string>{"ReLU-op1.output.0", "ReLU-op1.output.0", "Float32",
                                      "Float32", "[4]", "[4]"}));
  EXPECT_DOUBLE_EQ(std::stod(f[6]), 20 / std::sqrt(14.0 * 30.0));  // Cosine
  EXPECT_EQ(std::vector<std::string>(f.begin() + 7, f.begin() + 15),
            (std::vector<std::string>{"2", "2", "0.4", "0.75", "0.75", "3", "0", "1.5"}));
  EXPECT_DOUBLE_EQ(std::stod(f[15]), std::sqrt(14.0));  // NPU l2norm
  EXPECT_EQ(std::vector<std::string>(f.begin() + 16, f.begin() + 19),
            (std::vector<std::string>{"5", "0", "2"}));
  EXPECT_DOUBLE_EQ(std::stod(f[19]), std::sqrt(30.0));  // Bench l2norm
  EXPECT_EQ(std::vector<std::string>(f.begin() + 20, f.begin() + 24),
            (std::vector<std::string>{"No", "", "0.5", "1"}));  // MeanAbsErr 2/4, RMSE 1
  EXPECT_DOUBLE_EQ(std::stod(f[24]), 2 / std::sqrt(30.0));      // RelativeEucDist
  // KL: p = [e, 1/3, 2/3, 1] / (2 + e), q = [e, 1/5, 2/5, 1] / (8/5 + e).
  const double e = FLT_EPSILON, S = 2 + e, T = 1.6 + e;
  const double kl = e / S * std::log(T / S) + (1.0 / 3) / S * std::log((1.0 / 3) / S / (0.2 / T)) +
                    (2.0 / 3) / S * std::log((2.0 / 3) / S / (0.4 / T)) + 1 / S * std::log(T / S);
  EXPECT_NEAR(std::stod(f[25]), kl, 1e-14);
  EXPECT_EQ(std::vector<std::string>(f.begin() + 26, f.end()),
            (std::vector<std::string>{"ReLU", "Net/relu/ReLU", "net.py", "4", "forward", "",
                                      "Net/relu/ReLU-op1", "0", "0", da.tensors[4].path,
                                      db.tensors[4].path}));
  TempDir out;
  write_compare_csv(r, (out.path() / "c.csv").string());
  EXPECT_EQ(fs::file_size(out.path() / "c.csv"), csv.size());
  const std::string bad = (out.path() / "no" / "c.csv").string();
  EXPECT_EQ(error_of([&] { write_compare_csv(r, bad); }),
            bad + ": expected a writable CSV file, got one that cannot be opened");
}

}  // namespace
}  // namespace loom::debug
