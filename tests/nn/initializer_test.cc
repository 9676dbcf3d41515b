// nn/initializer.h: MindSpore's initializers, their bounds and deviations, and the factory.
#include "nn/initializer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/ir/error.h"

namespace loom::nn {
namespace {

using random::stream_id;

struct Stats {
  double mean = 0, std = 0, max_abs = 0;
};

Stats stats(const Tensor& t) {
  Stats s;
  const std::vector<double> v = t.to_doubles();
  for (double x : v) {
    s.mean += x;
    s.max_abs = std::max(s.max_abs, std::abs(x));
  }
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / static_cast<double>(v.size()));
  return s;
}

TEST(InitializerTest, FanInAndFanOut) {
  EXPECT_EQ(fan_in_and_fan_out({120, 400}), std::make_pair(400.0, 120.0));
  EXPECT_EQ(fan_in_and_fan_out({64, 32, 3, 3}), std::make_pair(288.0, 576.0));
  EXPECT_EQ(fan_in_and_fan_out({8, 4, 5}), std::make_pair(20.0, 40.0));
  EXPECT_THROW(fan_in_and_fan_out({10}), ValueError);
  EXPECT_THROW(fan_in_and_fan_out({}), ValueError);
}

TEST(InitializerTest, Gains) {
  EXPECT_DOUBLE_EQ(calculate_gain("linear"), 1.0);
  EXPECT_DOUBLE_EQ(calculate_gain("conv2d"), 1.0);
  EXPECT_DOUBLE_EQ(calculate_gain("sigmoid"), 1.0);
  EXPECT_DOUBLE_EQ(calculate_gain("tanh"), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(calculate_gain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(calculate_gain("leaky_relu", 0.0), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(calculate_gain("leaky_relu", std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(calculate_gain("selu"), 0.75);
  EXPECT_THROW(calculate_gain("swish"), ValueError);
}

TEST(InitializerTest, HeUniformBound) {
  RandomStream s(1, stream_id("he_uniform"));
  const Shape shape = {64, 32, 3, 3};  // fan_in 288
  const HeUniform he;                  // leaky_relu, slope 0: gain √2
  const double bound = std::sqrt(2.0) * std::sqrt(3.0 / 288.0);
  EXPECT_DOUBLE_EQ(he.bound(shape), bound);
  const Stats st = stats(he.init(shape, DType::kFloat32, s));
  EXPECT_LE(st.max_abs, bound);
  EXPECT_GT(st.max_abs, 0.99 * bound);
  EXPECT_NEAR(st.std, bound / std::sqrt(3.0), 0.02 * bound);

  // MindSpore 2.x's Dense / Conv2d default: slope √5 gives bound 1/√fan_in.
  EXPECT_NEAR(HeUniform(std::sqrt(5.0)).bound({120, 400}), 1.0 / std::sqrt(400.0), 1e-15);
  EXPECT_DOUBLE_EQ(HeUniform(0.0, "fan_out").bound(shape), std::sqrt(2.0) * std::sqrt(3.0 / 576));
  EXPECT_THROW(HeUniform(0.0, "fan_avg"), ValueError);
  EXPECT_THROW(HeUniform(0.0, "fan_in", "swish"), ValueError);
}

TEST(InitializerTest, HeNormalStd) {
  RandomStream s(1, stream_id("he_normal"));
  const Shape shape = {256, 1024};
  const HeNormal he(0.0, "fan_in", "relu");
  const double want = std::sqrt(2.0) / std::sqrt(1024.0);
  EXPECT_DOUBLE_EQ(he.stddev(shape), want);
  const Stats st = stats(he.init(shape, DType::kFloat32, s));
  EXPECT_NEAR(st.mean, 0.0, 5 * want / 512);
  EXPECT_NEAR(st.std, want, 0.01 * want);
}

TEST(InitializerTest, XavierUniformBound) {
  RandomStream s(1, stream_id("xavier"));
  const Shape shape = {300, 200};
  const XavierUniform x(2.0);
  const double bound = 2.0 * std::sqrt(6.0 / 500.0);
  EXPECT_DOUBLE_EQ(x.bound(shape), bound);
  const Stats st = stats(x.init(shape, DType::kFloat64, s));
  EXPECT_LE(st.max_abs, bound);
  EXPECT_GT(st.max_abs, 0.99 * bound);
}

TEST(InitializerTest, NormalUniformTruncated) {
  RandomStream s(1, stream_id("basic"));
  const Stats n = stats(Normal().init({500, 400}, DType::kFloat32, s));
  EXPECT_NEAR(n.std, 0.01, 1e-4);
  EXPECT_NEAR(n.mean, 0.0, 1e-4);
  const Stats n2 = stats(Normal(0.5, 3.0).init({500, 400}, DType::kFloat64, s));
  EXPECT_NEAR(n2.mean, 3.0, 5 * 0.5 / std::sqrt(2e5));

  const Stats u = stats(Uniform().init({500, 400}, DType::kFloat32, s));
  EXPECT_LE(u.max_abs, 0.07);
  EXPECT_GT(u.max_abs, 0.0699);

  const Tensor t = TruncatedNormal().init({500, 400}, DType::kFloat32, s);
  for (double v : t.to_doubles()) {
    ASSERT_LE(std::abs(v), 0.02 * (1 + 1e-6));
  }
  const Tensor t2 = TruncatedNormal(1.0, 5.0).init({1000}, DType::kFloat32, s);
  for (double v : t2.to_doubles()) {
    ASSERT_GE(v, 3.0 - 1e-6);
    ASSERT_LE(v, 7.0 + 1e-6);
  }
}

TEST(InitializerTest, Constants) {
  RandomStream s(1, 1);
  for (double v : Zero().init({3, 4}, DType::kFloat32, s).to_doubles()) EXPECT_EQ(v, 0.0);
  for (double v : One().init({3, 4}, DType::kFloat64, s).to_doubles()) EXPECT_EQ(v, 1.0);
  for (double v : Constant(0.25).init({7}, DType::kBFloat16, s).to_doubles()) EXPECT_EQ(v, 0.25);
  EXPECT_EQ(s.position(), 0u);  // constants draw nothing
  EXPECT_THROW(Zero().init({2}, DType::kInt32, s), TypeError);
}

TEST(InitializerTest, FactoryByName) {
  EXPECT_EQ(make_initializer("normal")->name(), "normal");
  EXPECT_EQ(make_initializer("TruncatedNormal")->name(), "truncatednormal");
  EXPECT_EQ(make_initializer("uniform")->name(), "uniform");
  EXPECT_EQ(make_initializer("he_uniform")->name(), "he_uniform");
  EXPECT_EQ(make_initializer("he_normal")->name(), "he_normal");
  EXPECT_EQ(make_initializer("xavier_uniform")->name(), "xavier_uniform");
  EXPECT_EQ(make_initializer("zeros")->name(), "zeros");
  EXPECT_EQ(make_initializer("ones")->name(), "ones");
  EXPECT_EQ(make_initializer("0.5")->name(), "constant");
  try {
    make_initializer("kaiming_magic");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("kaiming_magic"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("he_uniform"), std::string::npos);
  }
  RandomStream s(1, 1);
  for (double v : initializer("-1.5", {2, 2}, DType::kFloat32, s).to_doubles()) {
    EXPECT_EQ(v, -1.5);
  }
}

TEST(InitializerTest, ReproducibleUnderSeedAll) {
  random::seed_all(2026);
  RandomStream a("conv1.weight");
  const Tensor w1 = initializer("he_uniform", {6, 1, 5, 5}, DType::kFloat32, a);
  random::seed_all(2026);
  RandomStream b("conv1.weight");
  const Tensor w2 = initializer(HeUniform(), {6, 1, 5, 5}, DType::kFloat32, b);
  EXPECT_TRUE(w1.bitwise_equal(w2));
  RandomStream c("conv2.weight");
  const Tensor w3 = initializer("he_uniform", {6, 1, 5, 5}, DType::kFloat32, c);
  EXPECT_FALSE(w1.bitwise_equal(w3));
  random::seed_all(0);
}

}  // namespace
}  // namespace loom::nn
