// CPU kernels of the normalization and loss family (Float32 and Float64): BatchNorm,
// BatchNormApply, BatchNormGrad, SoftmaxCrossEntropyWithLogits,
// SparseSoftmaxCrossEntropyWithLogits, L2Loss.
// The math and the meaning of every output are stated in ops/norm_loss_ops.cc.
//
// Every sum is taken in double and in a fixed order, so results do not depend on the thread
// count. Batch norm views x as (N, C, S), S = H·W (1 for rank 2), and sums each channel over
// work units that are fixed by the shape alone: runs of at most kRunElements of one (n, c)
// plane when planes are long, or blocks of whole rows when they are short; each unit keeps its
// own partial and the partials are added in unit order. Within a unit, sums use eight
// interleaved lanes so the loop vectorizes without reassociation. In training, Float32 batch
// norm reads x twice (the shifted moments Σ(x - k), Σ(x - k)² in one pass, then y) and
// BatchNormGrad reads dy and x twice (Σdy and Σdy·(x - mean) in one pass, then dx). The losses
// work row by row (max-shifted log-sum-exp), and the sparse loss adds its row losses in row
// order.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/cpu.h"
#include "backends/kernel.h"
#include "backends/thread_pool.h"
#include "core/ir/error.h"

namespace loom::backend {

namespace {

using std::int64_t;

// Elements of work a pool task should get at least.
constexpr int64_t kGrainElements = 16384;
// Longest contiguous run one batch-norm unit sums.
constexpr int64_t kRunElements = 16384;
// Planes shorter than this are summed in blocks of whole rows instead.
constexpr int64_t kMinPlaneRun = 256;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

double combine_lanes(const double (&lane)[8], double tail) {
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])) +
         tail;
}

// Σ f(i) over [0, n) in eight interleaved lanes, combined in a fixed tree.
template <typename F>
double lane_sum(int64_t n, F&& f) {
  double lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) lane[j] += f(i + j);
  }
  double tail = 0;
  for (; i < n; ++i) tail += f(i);
  return combine_lanes(lane, tail);
}

// The eight lanes of lane_sum as one vector (a GCC / Clang vector extension), so the two sums
// below stay in registers; each lane adds the same terms in the same order as lane_sum does.
using Lanes = double __attribute__((vector_size(8 * sizeof(double))));

[[gnu::always_inline]] inline Lanes load_lanes(const float* p) {
  float __attribute__((vector_size(8 * sizeof(float)))) v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_convertvector(v, Lanes);
}

[[gnu::always_inline]] inline Lanes load_lanes(const double* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

[[gnu::always_inline]] inline double combine_lanes(Lanes lane, double tail) {
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])) +
         tail;
}

// {Σ (x[i] - k), Σ (x[i] - k)²} over [0, n), in lanes as lane_sum, reading x once.
std::array<double, 2> shifted_moment_sums(const float* x, int64_t n, double k) {
  const Lanes kv = Lanes{} + k;
  Lanes sum{}, squares{};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const Lanes d = load_lanes(x + i) - kv;
    sum += d;
    squares += d * d;
  }
  double tail_sum = 0, tail_squares = 0;
  for (; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - k;
    tail_sum += d;
    tail_squares += d * d;
  }
  return {combine_lanes(sum, tail_sum), combine_lanes(squares, tail_squares)};
}

// {Σ dy[i], Σ dy[i]·(x[i] - mu)} over [0, n), in lanes as lane_sum, reading dy and x once.
template <typename T>
std::array<double, 2> gradient_sums(const T* dy, const T* x, int64_t n, double mu) {
  const Lanes mv = Lanes{} + mu;
  Lanes sum{}, dot{};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const Lanes d = load_lanes(dy + i);
    sum += d;
    dot += d * (load_lanes(x + i) - mv);
  }
  double tail_sum = 0, tail_dot = 0;
  for (; i < n; ++i) {
    const auto d = static_cast<double>(dy[i]);
    tail_sum += d;
    tail_dot += d * (static_cast<double>(x[i]) - mu);
  }
  return {combine_lanes(sum, tail_sum), combine_lanes(dot, tail_dot)};
}

// ---------------------------------------------------------------------------------------------
// Batch norm

struct Layout {
  int64_t n, c, s;  // x as (N, C, S)
  int64_t per_channel() const { return n * s; }
};

Layout layout_of(const Tensor& x) {
  const Shape& d = x.shape();
  return {d[0], d[1], d.size() == 4 ? d[2] * d[3] : 1};
}

// Per-channel sums of K quantities. accumulate(c, offset, length, sums) adds to sums[0..K) the
// quantities of the contiguous elements [offset, offset + length) of x, all of channel c.
template <int K, typename Accumulate>
std::vector<std::array<double, K>> channel_sums(ThreadPool& pool, const Layout& l,
                                                Accumulate&& accumulate) {
  using Sums = std::array<double, K>;
  std::vector<Sums> total(static_cast<std::size_t>(l.c), Sums{});
  if (l.n == 0 || l.c == 0 || l.s == 0) return total;
  if (l.s >= kMinPlaneRun) {
    // Units (n, c, run): runs of at most kRunElements within one plane.
    const int64_t runs = ceil_div(l.s, kRunElements);
    const int64_t units = l.n * l.c * runs;
    std::vector<Sums> partial(static_cast<std::size_t>(units), Sums{});
    const int64_t grain = std::max<int64_t>(1, kGrainElements / std::min(l.s, kRunElements));
    pool.parallel_for(units, grain, [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) {
        const int64_t plane = u / runs;
        const int64_t first = (u % runs) * kRunElements;
        const int64_t length = std::min(kRunElements, l.s - first);
        accumulate(plane % l.c, plane * l.s + first, length,
                   partial[static_cast<std::size_t>(u)]);
      }
    });
    for (int64_t u = 0; u < units; ++u) {
      Sums& t = total[static_cast<std::size_t>((u / runs) % l.c)];
      for (int k = 0; k < K; ++k) t[k] += partial[static_cast<std::size_t>(u)][k];
    }
    return total;
  }
  // Units: blocks of whole rows (n), each with its own per-channel sums.
  const int64_t rows = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, l.c * l.s));
  const int64_t blocks = ceil_div(l.n, rows);
  std::vector<Sums> partial(static_cast<std::size_t>(blocks * l.c), Sums{});
  pool.parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      Sums* sums = &partial[static_cast<std::size_t>(b * l.c)];
      for (int64_t n = b * rows; n < std::min(l.n, (b + 1) * rows); ++n) {
        for (int64_t ch = 0; ch < l.c; ++ch) accumulate(ch, (n * l.c + ch) * l.s, l.s, sums[ch]);
      }
    }
  });
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t ch = 0; ch < l.c; ++ch) {
      for (int k = 0; k < K; ++k) {
        total[static_cast<std::size_t>(ch)][k] +=
            partial[static_cast<std::size_t>(b * l.c + ch)][k];
      }
    }
  }
  return total;
}

enum class Act { kNone, kReLU, kReLU6 };

// out[i] = act((in[i] - shift[c]) · mul[c] + add[c]) for every element i of channel c, the
// channel's parameters rounded to T. The activation is ReLU's and ReLU6's formula (a NaN stays).
template <Act kAct = Act::kNone, typename T>
void channel_affine(ThreadPool& pool, const Layout& l, const T* in,
                    const std::vector<double>& shift, const std::vector<double>& mul,
                    const std::vector<double>& add, T* out) {
  const int64_t planes = l.n * l.c;
  const int64_t grain = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, l.s));
  pool.parallel_for(planes, grain, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const auto ch = static_cast<std::size_t>(p % l.c);
      const T sh = static_cast<T>(shift[ch]);
      const T m = static_cast<T>(mul[ch]);
      const T a = static_cast<T>(add[ch]);
      const T* src = in + p * l.s;
      T* dst = out + p * l.s;
      for (int64_t i = 0; i < l.s; ++i) {
        const T v = (src[i] - sh) * m + a;
        if constexpr (kAct == Act::kNone) {
          dst[i] = v;
        } else if constexpr (kAct == Act::kReLU) {
          dst[i] = v < T(0) ? T(0) : v;
        } else {
          dst[i] = v < T(0) ? T(0) : (v > T(6) ? T(6) : v);
        }
      }
    }
  });
}

template <typename T>
std::vector<double> to_doubles(const Tensor& t) {
  const T* p = t.data<T>();
  return std::vector<double>(p, p + t.numel());
}

template <typename T>
void store(const std::vector<double>& values, Tensor& t) {
  T* p = t.data<T>();
  for (std::size_t i = 0; i < values.size(); ++i) p[i] = static_cast<T>(values[i]);
}

// Batch mean and biased batch variance per channel of Float32 x in one pass: Σd and Σd² in
// double, d = x - k with k the channel's first element (the shifted-data algorithm). A Float32
// x and its square are exact in double, so the only loss beyond the rounding of the sums is the
// cancellation in Σd²/m - (Σd/m)², by the factor (mean - k)² / var: about 1 when k is a
// typical element, and a first element 1000 standard deviations out still leaves var about
// 1e-10 relatively exact, far below Float32's resolution.
void batch_moments(ThreadPool& pool, const Layout& l, const float* x, std::vector<double>& mean,
                   std::vector<double>& var) {
  const auto m = static_cast<double>(l.per_channel());
  const auto channels = static_cast<std::size_t>(l.c);
  std::vector<double> shift(channels, 0.0);
  if (l.per_channel() > 0) {
    for (std::size_t c = 0; c < channels; ++c) {
      shift[c] = static_cast<double>(x[static_cast<int64_t>(c) * l.s]);
    }
  }
  const auto sums = channel_sums<2>(pool, l, [&](int64_t c, int64_t off, int64_t len,
                                                 auto& s) {
    const std::array<double, 2> d =
        shifted_moment_sums(x + off, len, shift[static_cast<std::size_t>(c)]);
    s[0] += d[0];
    s[1] += d[1];
  });
  mean.resize(channels);
  var.resize(channels);
  for (std::size_t c = 0; c < channels; ++c) {
    const double shifted_mean = sums[c][0] / m;
    mean[c] = shift[c] + shifted_mean;
    var[c] = std::max(0.0, sums[c][1] / m - shifted_mean * shifted_mean);
  }
}

// The same in two passes (the mean, then Σ(x - mean)²), for Float64 x, whose squares are not
// exact in double.
void batch_moments(ThreadPool& pool, const Layout& l, const double* x, std::vector<double>& mean,
                   std::vector<double>& var) {
  const auto m = static_cast<double>(l.per_channel());
  const auto sums = channel_sums<1>(pool, l, [&](int64_t, int64_t off, int64_t len, auto& s) {
    s[0] += lane_sum(len, [&](int64_t i) { return static_cast<double>(x[off + i]); });
  });
  mean.resize(static_cast<std::size_t>(l.c));
  for (std::size_t c = 0; c < mean.size(); ++c) mean[c] = sums[c][0] / m;
  const auto squares = channel_sums<1>(pool, l, [&](int64_t c, int64_t off, int64_t len,
                                                    auto& s) {
    const double mu = mean[static_cast<std::size_t>(c)];
    s[0] += lane_sum(len, [&](int64_t i) {
      const double d = x[off + i] - mu;
      return d * d;
    });
  });
  var.resize(mean.size());
  for (std::size_t c = 0; c < var.size(); ++c) var[c] = squares[c][0] / m;
}

template <typename T>
void batch_norm(const KernelContext& k) {
  const Tensor& x = k.in(0);
  const Layout l = layout_of(x);
  const auto channels = static_cast<std::size_t>(l.c);
  const std::vector<double> scale = to_doubles<T>(k.in(1));
  const std::vector<double> bias = to_doubles<T>(k.in(2));
  const std::vector<double> moving_mean = to_doubles<T>(k.in(3));
  const std::vector<double> moving_var = to_doubles<T>(k.in(4));
  const double eps = k.attr("epsilon").as_double();
  const T* px = x.data<T>();
  T* py = k.out(0).data<T>();

  std::vector<double> mul(channels);
  if (!k.attr("is_training").as_bool()) {
    for (std::size_t c = 0; c < channels; ++c) mul[c] = scale[c] / std::sqrt(moving_var[c] + eps);
    channel_affine(cpu::pool(k), l, px, moving_mean, mul, bias, py);
    store<T>(moving_mean, k.out(1));
    store<T>(moving_var, k.out(2));
    store<T>(moving_mean, k.out(3));
    store<T>(moving_var, k.out(4));
    return;
  }
  std::vector<double> mean, var;
  batch_moments(cpu::pool(k), l, px, mean, var);
  const double momentum = k.attr("momentum").as_double();
  const auto m = static_cast<double>(l.per_channel());
  std::vector<double> inv_std(channels), new_mean(channels), new_var(channels);
  for (std::size_t c = 0; c < channels; ++c) {
    // y's multiplier from the inverse std as out[4] stores it: BatchNormApply's, bitwise.
    inv_std[c] = static_cast<double>(static_cast<T>(1.0 / std::sqrt(var[c] + eps)));
    mul[c] = scale[c] * inv_std[c];
    new_mean[c] = (1 - momentum) * moving_mean[c] + momentum * mean[c];
    new_var[c] = (1 - momentum) * moving_var[c] + momentum * var[c] * m / (m - 1);
  }
  channel_affine(cpu::pool(k), l, px, mean, mul, bias, py);
  store<T>(new_mean, k.out(1));
  store<T>(new_var, k.out(2));
  store<T>(mean, k.out(3));
  store<T>(inv_std, k.out(4));
}

// act(y) of training BatchNorm again from its saved mean and inverse std (outputs 3 and 4), with
// the training kernel's arithmetic: the same parameters and the same channel_affine.
template <typename T>
void batch_norm_apply(const KernelContext& k) {
  const Tensor& x = k.in(0);
  const Layout l = layout_of(x);
  const std::vector<double> scale = to_doubles<T>(k.in(1));
  const std::vector<double> bias = to_doubles<T>(k.in(2));
  const std::vector<double> mean = to_doubles<T>(k.in(3));
  const std::vector<double> inv_std = to_doubles<T>(k.in(4));
  std::vector<double> mul(scale.size());
  for (std::size_t c = 0; c < mul.size(); ++c) mul[c] = scale[c] * inv_std[c];
  const std::string& act = k.attr("act").as_string();
  const T* px = x.data<T>();
  T* py = k.out(0).data<T>();
  if (act == "relu") {
    channel_affine<Act::kReLU>(cpu::pool(k), l, px, mean, mul, bias, py);
  } else if (act == "relu6") {
    channel_affine<Act::kReLU6>(cpu::pool(k), l, px, mean, mul, bias, py);
  } else {
    channel_affine(cpu::pool(k), l, px, mean, mul, bias, py);
  }
}

template <typename T>
void batch_norm_grad(const KernelContext& k) {
  const Tensor& x = k.in(1);
  const Layout l = layout_of(x);
  const auto channels = static_cast<std::size_t>(l.c);
  const T* pdy = k.in(0).data<T>();
  const T* px = x.data<T>();
  const std::vector<double> scale = to_doubles<T>(k.in(2));
  const std::vector<double> mean = to_doubles<T>(k.in(3));
  std::vector<double> inv_std = to_doubles<T>(k.in(4));
  const bool training = k.attr("is_training").as_bool();
  if (!training) {
    const double eps = k.attr("epsilon").as_double();
    for (double& v : inv_std) v = 1.0 / std::sqrt(v + eps);  // reserve_space_2 is the variance
  }
  // Σ dy and Σ dy·(x - mean) per channel.
  const auto sums = channel_sums<2>(cpu::pool(k), l, [&](int64_t c, int64_t off, int64_t len,
                                                   auto& s) {
    const std::array<double, 2> d =
        gradient_sums(pdy + off, px + off, len, mean[static_cast<std::size_t>(c)]);
    s[0] += d[0];
    s[1] += d[1];
  });
  std::vector<double> dscale(channels), dbias(channels);
  for (std::size_t c = 0; c < channels; ++c) {
    dbias[c] = sums[c][0];
    dscale[c] = sums[c][1] * inv_std[c];
  }
  store<T>(dscale, k.out(1));
  store<T>(dbias, k.out(2));

  std::vector<double> mul(channels);
  for (std::size_t c = 0; c < channels; ++c) mul[c] = scale[c] * inv_std[c];
  if (training && l.per_channel() > 0) {
    // dx = scale·inv_std·(dy - Σdy/M - x̂·Σ(dy·x̂)/M), x̂ = (x - mean)·inv_std: affine in x for
    // fixed dy: dx = dy·a + (x - mean)·b + c0 per channel.
    const auto m = static_cast<double>(l.per_channel());
    T* pdx = k.out(0).data<T>();
    const int64_t planes = l.n * l.c;
    const int64_t grain = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, l.s));
    cpu::pool(k).parallel_for(planes, grain, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const auto c = static_cast<std::size_t>(p % l.c);
        const T a = static_cast<T>(mul[c]);
        const T b = static_cast<T>(-mul[c] * inv_std[c] * dscale[c] / m);
        const T c0 = static_cast<T>(-mul[c] * dbias[c] / m);
        const T mu = static_cast<T>(mean[c]);
        const T* dy = pdy + p * l.s;
        const T* xs = px + p * l.s;
        T* dx = pdx + p * l.s;
        for (int64_t i = 0; i < l.s; ++i) dx[i] = dy[i] * a + (xs[i] - mu) * b + c0;
      }
    });
    return;
  }
  // Inference: dx = dy·scale·inv_std.
  const std::vector<double> zeros(channels, 0.0);
  channel_affine(cpu::pool(k), l, pdy, zeros, mul, zeros, k.out(0).data<T>());
}

// ---------------------------------------------------------------------------------------------
// Losses

// log Σ_j exp(row_j), shifted by the row's maximum.
template <typename T>
double log_sum_exp(const T* row, int64_t n) {
  if (n == 0) return -std::numeric_limits<double>::infinity();
  double max = static_cast<double>(row[0]);
  for (int64_t j = 1; j < n; ++j) max = std::max(max, static_cast<double>(row[j]));
  if (std::isinf(max)) return max;
  const double sum =
      lane_sum(n, [&](int64_t j) { return std::exp(static_cast<double>(row[j]) - max); });
  return max + std::log(sum);
}

template <typename T>
void softmax_cross_entropy(const KernelContext& k) {
  const Tensor& logits = k.in(0);
  const int64_t n = logits.shape()[0];
  const int64_t classes = logits.shape()[1];
  const T* px = logits.data<T>();
  const T* pl = k.in(1).data<T>();
  T* loss = k.out(0).data<T>();
  T* backprop = k.out(1).data<T>();
  const int64_t grain = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, classes));
  cpu::pool(k).parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* x = px + i * classes;
      const T* labels = pl + i * classes;
      const double lse = log_sum_exp(x, classes);
      loss[i] = static_cast<T>(-lane_sum(classes, [&](int64_t j) {
        return static_cast<double>(labels[j]) * (static_cast<double>(x[j]) - lse);
      }));
      T* bp = backprop + i * classes;
      for (int64_t j = 0; j < classes; ++j) {
        bp[j] = static_cast<T>(std::exp(static_cast<double>(x[j]) - lse) -
                               static_cast<double>(labels[j]));
      }
    }
  });
}

// The labels as int64, each checked to lie in [0, classes).
std::vector<int64_t> checked_labels(const Tensor& labels, int64_t classes) {
  std::vector<int64_t> out(static_cast<std::size_t>(labels.numel()));
  if (labels.dtype() == DType::kInt32) {
    const std::int32_t* p = labels.data<std::int32_t>();
    std::copy(p, p + labels.numel(), out.begin());
  } else {
    const int64_t* p = labels.data<int64_t>();
    std::copy(p, p + labels.numel(), out.begin());
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] < 0 || out[i] >= classes) {
      throw ValueError("SparseSoftmaxCrossEntropyWithLogits: expected labels in [0, " +
                       std::to_string(classes) + "), got " + std::to_string(out[i]) +
                       " at index " + std::to_string(i));
    }
  }
  return out;
}

template <typename T>
void sparse_softmax_cross_entropy(const KernelContext& k) {
  const Tensor& logits = k.in(0);
  const int64_t n = logits.shape()[0];
  const int64_t classes = logits.shape()[1];
  const std::vector<int64_t> labels = checked_labels(k.in(1), classes);
  const T* px = logits.data<T>();
  const int64_t grain = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, classes));
  if (k.attr("is_grad").as_bool()) {
    T* grad = k.out(0).data<T>();
    const double inv_n = 1.0 / static_cast<double>(n);
    cpu::pool(k).parallel_for(n, grain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const T* x = px + i * classes;
        const double lse = log_sum_exp(x, classes);
        T* g = grad + i * classes;
        for (int64_t j = 0; j < classes; ++j) {
          const double onehot = j == labels[static_cast<std::size_t>(i)] ? 1.0 : 0.0;
          g[j] = static_cast<T>((std::exp(static_cast<double>(x[j]) - lse) - onehot) * inv_n);
        }
      }
    });
    return;
  }
  std::vector<double> row_loss(static_cast<std::size_t>(n));
  cpu::pool(k).parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* x = px + i * classes;
      row_loss[static_cast<std::size_t>(i)] =
          log_sum_exp(x, classes) - static_cast<double>(x[labels[static_cast<std::size_t>(i)]]);
    }
  });
  const double total =
      lane_sum(n, [&](int64_t i) { return row_loss[static_cast<std::size_t>(i)]; });
  k.out(0).data<T>()[0] = static_cast<T>(total / static_cast<double>(n));
}

template <typename T>
void l2_loss(const KernelContext& k) {
  const Tensor& x = k.in(0);
  const T* px = x.data<T>();
  const int64_t n = x.numel();
  const int64_t chunks = ThreadPool::num_chunks(n, kGrainElements);
  std::vector<double> partial(static_cast<std::size_t>(chunks), 0.0);
  cpu::pool(k).parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t first = b * kGrainElements;
      const T* p = px + first;
      partial[static_cast<std::size_t>(b)] =
          lane_sum(std::min(kGrainElements, n - first), [&](int64_t i) {
            const auto v = static_cast<double>(p[i]);
            return v * v;
          });
    }
  });
  double total = 0;
  for (double p : partial) total += p;
  k.out(0).data<T>()[0] = static_cast<T>(total / 2);
}

template <typename T>
void add_kernels(KernelRegistry& r) {
  constexpr DType dtype = DTypeOf<T>::value;
  r.add("BatchNorm", dtype, batch_norm<T>).writes_every_output_element();
  r.add("BatchNormApply", dtype, batch_norm_apply<T>).writes_every_output_element();
  r.add("BatchNormGrad", dtype, batch_norm_grad<T>).writes_every_output_element();
  r.add("SoftmaxCrossEntropyWithLogits", dtype, softmax_cross_entropy<T>);
  r.add("SparseSoftmaxCrossEntropyWithLogits", dtype,
        sparse_softmax_cross_entropy<T>);
  r.add("L2Loss", dtype, l2_loss<T>);
}

}  // namespace

void register_cpu_norm_loss_kernels(KernelRegistry& r) {
  add_kernels<float>(r);
  add_kernels<double>(r);
}

}  // namespace loom::backend
