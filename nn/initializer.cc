#include "nn/initializer.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/ir/error.h"

namespace loom::nn {

namespace {

Tensor make(const Shape& shape, DType dtype, const char* who) {
  if (!is_floating(dtype)) {
    throw TypeError(std::string(who) + ": expected a floating dtype, got " +
                    std::string(dtype_name(dtype)));
  }
  return Tensor(dtype, shape);
}

double fan(const Shape& shape, const std::string& mode) {
  const auto [fan_in, fan_out] = fan_in_and_fan_out(shape);
  return mode == "fan_in" ? fan_in : fan_out;
}

void check_mode(const std::string& mode, const char* who) {
  if (mode != "fan_in" && mode != "fan_out") {
    throw ValueError(std::string(who) + ": mode must be 'fan_in' or 'fan_out', got '" + mode +
                     "'");
  }
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::pair<double, double> fan_in_and_fan_out(const Shape& shape) {
  if (shape.size() < 2) {
    throw ValueError("fan_in and fan_out cannot be computed for a tensor of fewer than 2 "
                     "dimensions, got shape " + shape_to_string(shape));
  }
  double receptive = 1.0;
  for (std::size_t i = 2; i < shape.size(); ++i) receptive *= static_cast<double>(shape[i]);
  return {static_cast<double>(shape[1]) * receptive, static_cast<double>(shape[0]) * receptive};
}

double calculate_gain(std::string_view nonlinearity, double param) {
  static const char* const kLinear[] = {"linear",           "conv1d",           "conv2d",
                                        "conv3d",           "conv_transpose1d", "conv_transpose2d",
                                        "conv_transpose3d", "sigmoid"};
  for (const char* n : kLinear) {
    if (nonlinearity == n) return 1.0;
  }
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nonlinearity == "selu") return 3.0 / 4.0;
  throw ValueError("calculate_gain: unsupported nonlinearity '" + std::string(nonlinearity) + "'");
}

Tensor Normal::init(const Shape& shape, DType dtype, RandomStream& stream) const {
  Tensor t = make(shape, dtype, "Normal");
  stream.fill_normal(t, mean_, sigma_);
  return t;
}

Tensor TruncatedNormal::init(const Shape& shape, DType dtype, RandomStream& stream) const {
  Tensor t = make(shape, dtype, "TruncatedNormal");
  stream.fill_truncated_normal(t, mean_, sigma_, a_, b_);
  return t;
}

Tensor Uniform::init(const Shape& shape, DType dtype, RandomStream& stream) const {
  Tensor t = make(shape, dtype, "Uniform");
  stream.fill_uniform(t, -scale_, scale_);
  return t;
}

HeUniform::HeUniform(double negative_slope, std::string mode, std::string nonlinearity)
    : negative_slope_(negative_slope), mode_(std::move(mode)),
      nonlinearity_(std::move(nonlinearity)) {
  check_mode(mode_, "HeUniform");
  calculate_gain(nonlinearity_, negative_slope_);  // validates the name
}

double HeUniform::bound(const Shape& shape) const {
  return std::sqrt(3.0) * calculate_gain(nonlinearity_, negative_slope_) /
         std::sqrt(fan(shape, mode_));
}

Tensor HeUniform::init(const Shape& shape, DType dtype, RandomStream& stream) const {
  Tensor t = make(shape, dtype, "HeUniform");
  const double b = bound(shape);
  stream.fill_uniform(t, -b, b);
  return t;
}

HeNormal::HeNormal(double negative_slope, std::string mode, std::string nonlinearity)
    : negative_slope_(negative_slope), mode_(std::move(mode)),
      nonlinearity_(std::move(nonlinearity)) {
  check_mode(mode_, "HeNormal");
  calculate_gain(nonlinearity_, negative_slope_);
}

double HeNormal::stddev(const Shape& shape) const {
  return calculate_gain(nonlinearity_, negative_slope_) / std::sqrt(fan(shape, mode_));
}

Tensor HeNormal::init(const Shape& shape, DType dtype, RandomStream& stream) const {
  Tensor t = make(shape, dtype, "HeNormal");
  stream.fill_normal(t, 0.0, stddev(shape));
  return t;
}

double XavierUniform::bound(const Shape& shape) const {
  const auto [fan_in, fan_out] = fan_in_and_fan_out(shape);
  return gain_ * std::sqrt(6.0 / (fan_in + fan_out));
}

Tensor XavierUniform::init(const Shape& shape, DType dtype, RandomStream& stream) const {
  Tensor t = make(shape, dtype, "XavierUniform");
  const double b = bound(shape);
  stream.fill_uniform(t, -b, b);
  return t;
}

Tensor Constant::init(const Shape& shape, DType dtype, RandomStream& stream) const {
  Tensor t = make(shape, dtype, "Constant");
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, value_);
  return t;
}

Tensor RandomKey::init(const Shape& shape, DType dtype, RandomStream& stream) const {
  if (dtype != DType::kInt64) {
    throw ValueError("RandomKey: expected dtype Int64, got " + std::string(dtype_name(dtype)));
  }
  Tensor t(DType::kInt64, shape);
  const std::vector<std::uint32_t> w = stream.words(2 * t.numel());
  auto* out = t.data<std::int64_t>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    out[i] = static_cast<std::int64_t>(static_cast<std::uint64_t>(w[2 * i]) |
                                       (static_cast<std::uint64_t>(w[2 * i + 1]) << 32));
  }
  return t;
}

std::unique_ptr<Initializer> make_initializer(std::string_view name_or_spec) {
  const std::string n = lower(name_or_spec);
  if (n == "normal") return std::make_unique<Normal>();
  if (n == "truncatednormal" || n == "truncated_normal") return std::make_unique<TruncatedNormal>();
  if (n == "uniform") return std::make_unique<Uniform>();
  if (n == "he_uniform" || n == "heuniform") return std::make_unique<HeUniform>();
  if (n == "he_normal" || n == "henormal") return std::make_unique<HeNormal>();
  if (n == "xavier_uniform" || n == "xavieruniform") return std::make_unique<XavierUniform>();
  if (n == "zeros" || n == "zero") return std::make_unique<Zero>();
  if (n == "ones" || n == "one") return std::make_unique<One>();
  if (!n.empty()) {
    char* end = nullptr;
    const double v = std::strtod(n.c_str(), &end);
    if (end == n.c_str() + n.size() && std::isfinite(v)) return std::make_unique<Constant>(v);
  }
  throw ValueError("initializer: unknown name '" + std::string(name_or_spec) +
                   "'; expected one of normal, truncatednormal, uniform, he_uniform, he_normal, "
                   "xavier_uniform, zeros, ones, or a number");
}

Tensor initializer(std::string_view name_or_spec, const Shape& shape, DType dtype,
                   RandomStream& stream) {
  return make_initializer(name_or_spec)->init(shape, dtype, stream);
}

Tensor initializer(const Initializer& init, const Shape& shape, DType dtype,
                   RandomStream& stream) {
  return init.init(shape, dtype, stream);
}

}  // namespace loom::nn
