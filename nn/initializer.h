/// \file
/// Parameter initializers, named and parameterised as mindspore.common.initializer names them.
/// Every random initializer draws from a random::RandomStream (core/random/random.h), so a weight is
/// a function of (seed_all's seed, the stream's id, its position) only.
///
///     RandomStream s("fc1.weight");
///     Tensor w = HeUniform(std::sqrt(5.0)).init({120, 400}, DType::kFloat32, s);
///     Tensor b = initializer("zeros", {120}, DType::kFloat32, s);
///
/// fan_in / fan_out as MindSpore's _calculate_fan_in_and_fan_out computes them: a rank-2 (dense)
/// weight (out, in) has fan_in = in, fan_out = out; a rank ≥ 3 (conv) weight (O, I, k...) has
/// fan_in = I · Πk, fan_out = O · Πk; rank < 2 is a ValueError.
///
/// gain (MindSpore's calculate_gain): linear, conv1d/2d/3d, conv_transpose*, sigmoid → 1;
/// tanh → 5/3; relu → √2; leaky_relu(slope) → √(2 / (1 + slope²)); selu → 3/4.
///
/// MindSpore's per-layer defaults, for the layers that follow:
/// - nn.Dense: since MindSpore 2.1 weight_init=None means HeUniform and bias_init=None means
///   Uniform (CONFIRMED from the r2.1–r2.4 nn.Dense docs; 1.x and 2.0 used weight 'normal',
///   bias 'zeros'). The parameters — HeUniform(negative_slope=√5) and a bias Uniform with bound
///   1/√fan_in (torch's Linear reset) — are from MindSpore's source and are UNCONFIRMED here.
/// - nn.Conv2d: the same change in 2.1 (weight HeUniform(negative_slope=√5), bias
///   Uniform(1/√fan_in)); UNCONFIRMED here. 1.x: weight 'normal', bias 'zeros'.
/// - nn.BatchNorm2d: gamma 'ones', beta 'zeros', moving_mean 'zeros', moving_var 'ones'
///   (UNCONFIRMED here).
/// With negative_slope = √5, HeUniform's bound is √(6 / ((1 + 5) fan_in)) = 1/√fan_in.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "core/random/random.h"
#include "core/ir/tensor.h"

namespace loom::nn {

using random::RandomStream;

/// (fan_in, fan_out) of a weight shape, as above. Throws ValueError for rank < 2.
std::pair<double, double> fan_in_and_fan_out(const Shape& shape);
/// MindSpore's calculate_gain; param is leaky_relu's negative slope (0.01 when absent there).
/// Throws ValueError for an unknown nonlinearity.
double calculate_gain(std::string_view nonlinearity, double param = 0.01);

/// The base of the initializers: draws a parameter's initial value.
class Initializer {
 public:
  virtual ~Initializer() = default;
  /// A new tensor of `shape` and floating `dtype`, drawn from `stream` (which advances).
  virtual Tensor init(const Shape& shape, DType dtype, RandomStream& stream) const = 0;
  /// The initializer's lower-case name, MindSpore's alias where it has one ("normal",
  /// "he_uniform", "zeros", "constant"...).
  virtual std::string name() const = 0;
};

/// N(mean, sigma²).
class Normal : public Initializer {
 public:
  /// N(mean, sigma²), MindSpore's defaults sigma 0.01, mean 0.
  explicit Normal(double sigma = 0.01, double mean = 0.0) : sigma_(sigma), mean_(mean) {}
  Tensor init(const Shape& shape, DType dtype, RandomStream& stream) const override;
  /// "normal".
  std::string name() const override { return "normal"; }

 private:
  double sigma_, mean_;
};

/// N(mean, sigma²) truncated to [mean + a·sigma, mean + b·sigma]: MindSpore's default keeps draws
/// within 2σ of the mean (its migration notes; whether 2.x's a, b are absolute is UNCONFIRMED).
class TruncatedNormal : public Initializer {
 public:
  /// a and b are in units of sigma, relative to the mean.
  explicit TruncatedNormal(double sigma = 0.01, double mean = 0.0, double a = -2.0, double b = 2.0)
      : sigma_(sigma), mean_(mean), a_(a), b_(b) {}
  Tensor init(const Shape& shape, DType dtype, RandomStream& stream) const override;
  /// "truncatednormal".
  std::string name() const override { return "truncatednormal"; }

 private:
  double sigma_, mean_, a_, b_;
};

/// U(-scale, scale).
class Uniform : public Initializer {
 public:
  /// U(-scale, scale), MindSpore's default scale 0.07.
  explicit Uniform(double scale = 0.07) : scale_(scale) {}
  Tensor init(const Shape& shape, DType dtype, RandomStream& stream) const override;
  /// "uniform".
  std::string name() const override { return "uniform"; }

 private:
  double scale_;
};

/// Kaiming: std = gain / √fan with fan = fan_in or fan_out (mode) and
/// gain = calculate_gain(nonlinearity, negative_slope). HeUniform draws U(-√3·std, √3·std),
/// HeNormal N(0, std²). Throws ValueError for a mode other than fan_in / fan_out.
class HeUniform : public Initializer {
 public:
  /// negative_slope is leaky_relu's slope (calculate_gain's param); mode "fan_in" or "fan_out".
  /// Throws ValueError for another mode or an unknown nonlinearity.
  explicit HeUniform(double negative_slope = 0.0, std::string mode = "fan_in",
                     std::string nonlinearity = "leaky_relu");
  Tensor init(const Shape& shape, DType dtype, RandomStream& stream) const override;
  /// "he_uniform".
  std::string name() const override { return "he_uniform"; }
  double bound(const Shape& shape) const;  ///< √3 · gain / √fan for a weight of `shape`.

 private:
  double negative_slope_;
  std::string mode_, nonlinearity_;
};

/// Kaiming normal: N(0, std²) with std = gain / √fan (see HeUniform).
class HeNormal : public Initializer {
 public:
  /// negative_slope is leaky_relu's slope (calculate_gain's param); mode "fan_in" or "fan_out".
  /// Throws ValueError for another mode or an unknown nonlinearity.
  explicit HeNormal(double negative_slope = 0.0, std::string mode = "fan_in",
                    std::string nonlinearity = "leaky_relu");
  Tensor init(const Shape& shape, DType dtype, RandomStream& stream) const override;
  /// "he_normal".
  std::string name() const override { return "he_normal"; }
  double stddev(const Shape& shape) const;  ///< gain / √fan for a weight of `shape`.

 private:
  double negative_slope_;
  std::string mode_, nonlinearity_;
};

/// U(-b, b) with b = gain · √(6 / (fan_in + fan_out)).
class XavierUniform : public Initializer {
 public:
  /// The gain (default 1).
  explicit XavierUniform(double gain = 1.0) : gain_(gain) {}
  Tensor init(const Shape& shape, DType dtype, RandomStream& stream) const override;
  /// "xavier_uniform".
  std::string name() const override { return "xavier_uniform"; }
  /// b = gain · √(6 / (fan_in + fan_out)) for a weight of `shape`.
  double bound(const Shape& shape) const;

 private:
  double gain_;
};

/// Every element `value` (the stream is not used).
class Constant : public Initializer {
 public:
  /// Fills a floating tensor with `value`.
  explicit Constant(double value) : value_(value) {}
  Tensor init(const Shape& shape, DType dtype, RandomStream& stream) const override;
  /// "constant".
  std::string name() const override { return "constant"; }

 private:
  double value_;
};

/// Constant(0): MindSpore's "zeros".
class Zero : public Constant {
 public:
  Zero() : Constant(0.0) {}
  /// "zeros".
  std::string name() const override { return "zeros"; }
};

/// Constant(1): MindSpore's "ones".
class One : public Constant {
 public:
  One() : Constant(1.0) {}
  /// "ones".
  std::string name() const override { return "ones"; }
};

/// A random key for a stateful random op (Dropout's `key`): an Int64 tensor of `shape` whose
/// element i is w[2i] | w[2i+1] << 32 from the stream's 32-bit words w (2 × numel words). Only
/// DType::kInt64 is accepted (ValueError otherwise).
class RandomKey : public Initializer {
 public:
  Tensor init(const Shape& shape, DType dtype, RandomStream& stream) const override;
  /// "random_key".
  std::string name() const override { return "random_key"; }
};

/// An initializer with its defaults, by MindSpore's alias (case-insensitive): "normal",
/// "truncatednormal" (or "truncated_normal"), "uniform", "he_uniform", "he_normal",
/// "xavier_uniform", "zeros" / "zero", "ones" / "one". A number ("0.5") is Constant(0.5), as
/// MindSpore's initializer() takes numbers. Throws ValueError naming the known names otherwise.
std::unique_ptr<Initializer> make_initializer(std::string_view name_or_spec);

/// MindSpore's initializer(init, shape, dtype): a tensor drawn from `stream` by `init`, or by
/// make_initializer(name_or_spec) (whose ValueError it throws).
///@{
Tensor initializer(std::string_view name_or_spec, const Shape& shape, DType dtype,
                   RandomStream& stream);
Tensor initializer(const Initializer& init, const Shape& shape, DType dtype, RandomStream& stream);
///@}

}  // namespace loom::nn
