#include "core/random/random.h"

#include <atomic>
#include <cmath>
#include <numbers>
#include <string>

#include "core/random/philox.h"
#include "core/ir/error.h"

namespace loom::random {

namespace {

std::atomic<std::uint64_t> g_seed{0};
std::atomic<bool> g_deterministic{false};

void check_count(std::int64_t n) {
  if (n < 0) throw ValueError("RandomStream: negative count " + std::to_string(n));
}

// Words [first, first + n) of the stream, into out.
void stream_words(std::uint64_t seed, std::uint64_t id, std::uint64_t first, std::int64_t n,
                  std::uint32_t* out) {
  std::int64_t i = 0;
  while (i < n) {
    const std::uint64_t w = first + static_cast<std::uint64_t>(i);
    const philox::Block r = philox::stream_block(seed, id, w / 4);
    for (std::uint64_t j = w % 4; j < 4 && i < n; ++j, ++i) out[i] = r[j];
  }
}

double u32_open(std::uint32_t w) { return (static_cast<double>(w) + 0.5) * 0x1p-32; }

double u53(std::uint32_t hi, std::uint32_t lo) {
  return static_cast<double>((static_cast<std::uint64_t>(hi) << 21) | (lo >> 11)) * 0x1p-53;
}

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }

// Acklam's rational approximation of Φ⁻¹ (relative error < 1.2e-9), refined by one Halley step.
double normal_quantile(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                             -2.759285104469687e+02, 1.383577518672690e+02,
                             -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                             -1.556989798598866e+02, 6.680131188771972e+01,
                             -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                             -2.400758277161838e+00, -2.549732539343734e+00,
                             4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                             2.445134137142996e+00, 3.754408661907416e+00};
  if (p <= 0.0) return -INFINITY;
  if (p >= 1.0) return INFINITY;
  const double plow = 0.02425;
  double x;
  if (p < plow) {
    const double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p <= 1 - plow) {
    const double q = p - 0.5;
    const double r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  } else {
    const double q = std::sqrt(-2 * std::log(1 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  const double e = normal_cdf(x) - p;
  const double u = e * std::sqrt(2 * std::numbers::pi) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

void check_floating(const Tensor& t, const char* what) {
  if (!t.defined() || !is_floating(t.dtype())) {
    throw TypeError(std::string("RandomStream::") + what + ": expected a floating tensor, got " +
                    (t.defined() ? t.describe() : std::string("an undefined tensor")));
  }
}

void store(Tensor& t, const std::vector<double>& v, double scale, double shift) {
  const std::int64_t n = t.numel();
  if (t.dtype() == DType::kFloat32) {
    float* out = t.data<float>();
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(shift + scale * v[i]);
  } else if (t.dtype() == DType::kFloat64) {
    double* out = t.data<double>();
    for (std::int64_t i = 0; i < n; ++i) out[i] = shift + scale * v[i];
  } else {
    for (std::int64_t i = 0; i < n; ++i) t.set(i, shift + scale * v[i]);
  }
}

}  // namespace

void seed_all(std::uint64_t seed, bool deterministic) {
  g_seed.store(seed);
  g_deterministic.store(deterministic);
}

std::uint64_t global_seed() { return g_seed.load(); }
bool deterministic_mode() { return g_deterministic.load(); }

std::uint64_t stream_id(std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
  for (const char ch : name) {
    h ^= static_cast<unsigned char>(ch);
    h *= 0x100000001b3ull;  // FNV 64 prime
  }
  return h;
}

RandomStream::RandomStream(std::string_view name)
    : seed_(global_seed()), id_(stream_id(name)), position_(0) {}

RandomStream::RandomStream(std::uint64_t seed, std::uint64_t id, std::uint64_t position)
    : seed_(seed), id_(id), position_(position) {}

std::vector<std::uint32_t> RandomStream::words(std::int64_t n) {
  check_count(n);
  std::vector<std::uint32_t> w(static_cast<std::size_t>(n));
  stream_words(seed_, id_, position_, n, w.data());
  position_ += static_cast<std::uint64_t>(n);
  return w;
}

std::vector<float> RandomStream::uniform(std::int64_t n) {
  const std::vector<std::uint32_t> w = words(n);
  std::vector<float> u(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) u[i] = philox::uniform01(w[i]);
  return u;
}

std::vector<double> RandomStream::normal(std::int64_t n) {
  check_count(n);
  const std::vector<std::uint32_t> w = words(2 * n);
  std::vector<double> z(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < z.size(); ++i) {
    const double u1 = u32_open(w[2 * i]);
    const double u2 = static_cast<double>(w[2 * i + 1]) * 0x1p-32;
    z[i] = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  return z;
}

std::vector<double> RandomStream::truncated_normal(std::int64_t n, double a, double b) {
  check_count(n);
  if (!(a < b)) {
    throw ValueError("RandomStream::truncated_normal: expected a < b, got a=" +
                     std::to_string(a) + " b=" + std::to_string(b));
  }
  const double pa = normal_cdf(a);
  const double pb = normal_cdf(b);
  const std::vector<std::uint32_t> w = words(2 * n);
  std::vector<double> z(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < z.size(); ++i) {
    const double p = pa + u53(w[2 * i], w[2 * i + 1]) * (pb - pa);
    z[i] = std::min(b, std::max(a, normal_quantile(p)));
  }
  return z;
}

void RandomStream::fill_uniform(Tensor& t, double lo, double hi) {
  check_floating(t, "fill_uniform");
  const std::vector<float> u = uniform(t.numel());
  const std::vector<double> v(u.begin(), u.end());
  store(t, v, hi - lo, lo);
}

void RandomStream::fill_normal(Tensor& t, double mean, double std) {
  check_floating(t, "fill_normal");
  store(t, normal(t.numel()), std, mean);
}

void RandomStream::fill_truncated_normal(Tensor& t, double mean, double std, double a,
                                         double b) {
  check_floating(t, "fill_truncated_normal");
  store(t, truncated_normal(t.numel(), a, b), std, mean);
}

}  // namespace loom::random
