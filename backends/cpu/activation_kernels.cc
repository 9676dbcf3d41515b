// CPU kernels of the activation family: ReLU, ReluGrad, ReLU6, Sigmoid, Tanh, GeLU, Softmax,
// LogSoftmax and Dropout, for Float32 and Float64 (ReLU also for Int32 and Int64).
//
// Pointwise ops run over flat chunks of kElementwiseGrain elements, in spans small enough for a
// stack temporary, with Eigen's vectorized exp and tanh (its Float32 tanh is within a few ulps
// and rounds to +-1 beyond |x| = 7.9, as TensorFlow's CPU tanh does). Sigmoid is evaluated as
// 1 / (1 + e) or e / (1 + e) with e = exp(-|x|), which never overflows and keeps its relative
// accuracy for large |x|; GeLU as x / (1 + exp(-2u)), which equals the tanh form
// x (1 + tanh(u)) / 2 exactly but does not lose the result to cancellation in 1 + tanh(u) for
// negative x. Softmax and LogSoftmax subtract the maximum along the axis before exponentiating;
// each line along the axis is computed by one thread in a fixed order, so results do not depend
// on the thread count; a non-last axis is walked a tile of adjacent columns at a time, so every
// pass reads contiguous rows. Dropout takes element i from word i % 4 of Philox block i / 4
// (core/random/philox.h), sixteen blocks at a time and without branches on the draw: any chunking
// gives the same mask.
// GCC 12 takes the undefined lanes of Eigen's AVX-512 partial-packet loads and reductions for
// uninitialized reads (over a hundred false reports for this file); Eigen never uses those lanes.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/elementwise.h"
#include "backends/cpu/cpu.h"
#include "backends/kernel.h"
#include "core/random/philox.h"
#include "backends/thread_pool.h"

namespace loom::backend {

namespace {

using cpu::kElementwiseGrain;

// Elements per span of a pointwise op (bounds its stack temporaries).
constexpr std::int64_t kSpan = 512;

template <typename T>
using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
template <typename T>
using SpanArray = Eigen::Array<T, Eigen::Dynamic, 1, 0, kSpan, 1>;  // on the stack
template <typename T>
using In = Eigen::Map<const Array<T>>;
template <typename T>
using Out = Eigen::Map<Array<T>>;

// y = f(x) over n contiguous elements, in spans of at most kSpan; f(In<T>, Out<T>). Spans start
// at multiples of kSpan from x, so Eigen's packets fall on the same elements whatever blocks a
// caller hands over (the op's kernel chunk by chunk, FusedElementwise block by block).
template <typename T, typename F>
void spans(const T* x, T* y, std::int64_t n, F f) {
  for (std::int64_t s = 0; s < n; s += kSpan) {
    const std::int64_t m = std::min(kSpan, n - s);
    f(In<T>(x + s, m), Out<T>(y + s, m));
  }
}

// The op's kernel: its block functor (KernelDef::block) over the pool's chunks.
template <typename T, BlockFn Block>
void pointwise(const KernelContext& k) {
  const T* px = k.in(0).data<T>();
  T* py = k.out(0).data<T>();
  cpu::pool(k).parallel_for(k.out(0).numel(), kElementwiseGrain,
                            [&](std::int64_t begin, std::int64_t end) {
                              const void* in[1] = {px + begin};
                              Block(in, py + begin, end - begin);
                            });
}

template <typename T>
const T* input0(const void* const* in) {
  return static_cast<const T*>(in[0]);
}

// ---- Pointwise ----------------------------------------------------------------------------

template <typename T>
void relu_block(const void* const* in, void* out, std::int64_t n) {
  // `x < 0 ? 0 : x` keeps NaN.
  spans(input0<T>(in), static_cast<T*>(out), n, [](In<T> x, Out<T> y) {
    for (Eigen::Index i = 0; i < x.size(); ++i) y[i] = x[i] < T(0) ? T(0) : x[i];
  });
}

// dx = dout where y > 0, else +0, without a branch: the comparison becomes an all-ones or
// all-zeros mask ANDed with dout's bits, so a NaN in dout of a unit that is off gives 0 (a
// product would give NaN) and the loop vectorizes to a compare and an and. dx may alias dout or
// y at the same index.
template <typename T>
void relu_grad(const KernelContext& k) {
  using U = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
  static_assert(sizeof(U) == sizeof(T));
  const T* pd = k.in(0).data<T>();
  const T* py = k.in(1).data<T>();
  T* px = k.out(0).data<T>();
  cpu::pool(k).parallel_for(k.out(0).numel(), kElementwiseGrain, [&](std::int64_t begin,
                                                                     std::int64_t end) {
#pragma GCC ivdep
    for (std::int64_t i = begin; i < end; ++i) {
      const U on = U(0) - static_cast<U>(py[i] > T(0));
      px[i] = std::bit_cast<T>(static_cast<U>(std::bit_cast<U>(pd[i]) & on));
    }
  });
}

template <typename T>
void relu6_block(const void* const* in, void* out, std::int64_t n) {
  spans(input0<T>(in), static_cast<T*>(out), n, [](In<T> x, Out<T> y) {
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      y[i] = x[i] < T(0) ? T(0) : (x[i] > T(6) ? T(6) : x[i]);
    }
  });
}

template <typename T>
void sigmoid_block(const void* const* in, void* out, std::int64_t n) {
  spans(input0<T>(in), static_cast<T*>(out), n, [](In<T> x, Out<T> y) {
    SpanArray<T> e = (-x.abs()).exp();
    // A plain loop on the stack buffer rather than Eigen's select, which Eigen 3.4 does not
    // vectorize.
    const T* px = x.data();
    T* pe = e.data();
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      pe[i] = (px[i] >= T(0) ? T(1) : pe[i]) / (T(1) + pe[i]);
    }
    y = e;
  });
}

template <typename T>
void tanh_block(const void* const* in, void* out, std::int64_t n) {
  spans(input0<T>(in), static_cast<T*>(out), n, [](In<T> x, Out<T> y) { y = x.tanh(); });
}

template <typename T>
void gelu_block(const void* const* in, void* out, std::int64_t n) {
  // -2u = -2 sqrt(2/pi) (x + 0.044715 x^3).
  const T minus_two_scale = T(-2 * 0.7978845608028654);
  const T cubic = T(0.044715);
  spans(input0<T>(in), static_cast<T*>(out), n, [=](In<T> x, Out<T> y) {
    const SpanArray<T> z = (minus_two_scale * (x + cubic * x.cube())).exp();
    y = x / (T(1) + z);
  });
}

// ---- Softmax and LogSoftmax ---------------------------------------------------------------

// Lines along a non-last axis are handled a tile of adjacent columns at a time, each pass
// reading rows of kTileWidth contiguous elements: wide enough to stream from memory at full speed
// and to leave few tiles per line, narrow enough to keep the tile's running max and sum in L1.
constexpr std::int64_t kTileWidth = 1024;

// One contiguous line of n elements.
template <typename T, bool kLog>
void softmax_line(const T* px, T* py, std::int64_t n) {
  In<T> x(px, n);
  Out<T> y(py, n);
  const T m = x.maxCoeff();
  if constexpr (kLog) {
    const T log_sum = std::log((x - m).exp().sum());
    y = (x - m) - log_sum;
  } else {
    y = (x - m).exp();
    y = y / y.sum();
  }
}

// Lines along a non-last axis: element (a, j) of the tile is px[a * inner + j], j < width;
// m and sum are scratch of at least `width` elements.
template <typename T, bool kLog>
void softmax_tile(const T* px, T* py, std::int64_t n, std::int64_t inner, std::int64_t width,
                  Array<T>& m_buffer, Array<T>& sum_buffer) {
  auto m = m_buffer.head(width);
  auto sum = sum_buffer.head(width);
  m = In<T>(px, width);
  for (std::int64_t a = 1; a < n; ++a) m = m.max(In<T>(px + a * inner, width));
  // LogSoftmax reads x twice and Softmax reads only y after this pass, so either may run in
  // place.
  sum.setZero();
  for (std::int64_t a = 0; a < n; ++a) {
    if constexpr (kLog) {
      sum += (In<T>(px + a * inner, width) - m).exp();
    } else {
      Out<T> y(py + a * inner, width);
      y = (In<T>(px + a * inner, width) - m).exp();
      sum += y;
    }
  }
  if constexpr (kLog) {
    sum = sum.log();
    for (std::int64_t a = 0; a < n; ++a) {
      Out<T>(py + a * inner, width) = (In<T>(px + a * inner, width) - m) - sum;
    }
  } else {
    for (std::int64_t a = 0; a < n; ++a) {
      Out<T> y(py + a * inner, width);
      y = y / sum;
    }
  }
}

template <typename T, bool kLog>
void softmax(const KernelContext& k) {
  const Tensor& x = k.in(0);
  const Shape& shape = x.shape();
  const auto rank = static_cast<std::int64_t>(shape.size());
  const ir::Value& attr = k.attr("axis");
  std::int64_t axis = attr.is_tuple() ? attr.as_ints().at(0) : attr.as_int();
  if (axis < 0) axis += std::max<std::int64_t>(rank, 1);
  std::int64_t outer = 1, n = 1, inner = 1;
  for (std::int64_t d = 0; d < rank; ++d) {
    (d < axis ? outer : d == axis ? n : inner) *= shape[static_cast<std::size_t>(d)];
  }
  const T* px = x.data<T>();
  T* py = k.out(0).data<T>();
  if (outer * n * inner == 0) return;
  if (inner == 1) {
    cpu::pool(k).parallel_for(outer, std::max<std::int64_t>(1, kElementwiseGrain / n),
                        [&](std::int64_t begin, std::int64_t end) {
                          for (std::int64_t r = begin; r < end; ++r) {
                            softmax_line<T, kLog>(px + r * n, py + r * n, n);
                          }
                        });
    return;
  }
  const std::int64_t width = std::min(kTileWidth, inner);
  const std::int64_t tiles = (inner + width - 1) / width;
  cpu::pool(k).parallel_for(outer * tiles, std::max<std::int64_t>(1, kElementwiseGrain / (n * width)),
                      [&](std::int64_t begin, std::int64_t end) {
                        Array<T> m(width), sum(width);
                        for (std::int64_t t = begin; t < end; ++t) {
                          const std::int64_t j = (t % tiles) * width;
                          const std::int64_t offset = (t / tiles) * n * inner + j;
                          softmax_tile<T, kLog>(px + offset, py + offset, n, inner,
                                                std::min(width, inner - j), m, sum);
                        }
                      });
}

// ---- Dropout ------------------------------------------------------------------------------

template <typename T>
void dropout(const KernelContext& k) {
  const T* px = k.in(0).data<T>();
  const std::int64_t* key = k.in(1).data<std::int64_t>();
  const auto seed = static_cast<std::uint64_t>(key[0]);
  const auto stream = static_cast<std::uint64_t>(key[1]);
  const double keep_prob = k.attr("keep_prob").as_double();
  const std::uint32_t bound = random::philox::uniform01_bound(keep_prob);
  const T scale = static_cast<T>(1.0 / keep_prob);
  T* py = k.out(0).data<T>();
  T* pmask = k.out(1).data<T>();
  constexpr std::int64_t kBatchElements = 4 * random::philox::kBatch;
  cpu::pool(k).parallel_for(
      k.out(0).numel(), kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
        std::uint32_t words[4][random::philox::kBatch];
        std::uint32_t flat[kBatchElements];  // element order, so the loop below vectorizes
        std::int64_t i = begin;
        while (i < end) {
          const std::int64_t base = i / 4 * 4;
          random::philox::stream_batch(seed, stream, static_cast<std::uint64_t>(base / 4), words);
          for (int j = 0; j < random::philox::kBatch; ++j) {
            for (int w = 0; w < 4; ++w) flat[4 * j + w] = words[w][j];
          }
          const std::int64_t stop = std::min(end - base, kBatchElements);
          const T* x = px + base;
          T* y = py + base;
          T* mask = pmask + base;
          for (std::int64_t e = i - base; e < stop; ++e) {
            const T m = (flat[e] >> 8) < bound ? T(1) : T(0);
            mask[e] = m;
            // x * mask, not a select: NaN and inf in dropped units give NaN, as
            // x * mask / keep_prob does in MindSpore and PyTorch.
            y[e] = x[e] * m * scale;
          }
          i = base + stop;
        }
      });
}

}  // namespace

void register_cpu_activation_kernels(KernelRegistry& r) {
  // Pointwise, in place, every output element; ReLU, ReLU6, Sigmoid and Tanh are fusable (their
  // block functors go into FusedElementwise). Integer ReLU has no block.
  r.add("ReLU", DType::kFloat32, pointwise<float, &relu_block<float>>)
      .writes_every_output_element().elementwise(&relu_block<float>);
  r.add("ReLU", DType::kFloat64, pointwise<double, &relu_block<double>>)
      .writes_every_output_element().elementwise(&relu_block<double>);
  r.add("ReLU", DType::kInt32, pointwise<std::int32_t, &relu_block<std::int32_t>>)
      .writes_every_output_element().elementwise();
  r.add("ReLU", DType::kInt64, pointwise<std::int64_t, &relu_block<std::int64_t>>)
      .writes_every_output_element().elementwise();
  r.add("ReluGrad", DType::kFloat32, relu_grad<float>).writes_every_output_element().elementwise();
  r.add("ReluGrad", DType::kFloat64, relu_grad<double>).writes_every_output_element().elementwise();
  r.add("ReLU6", DType::kFloat32, pointwise<float, &relu6_block<float>>)
      .writes_every_output_element().elementwise(&relu6_block<float>);
  r.add("ReLU6", DType::kFloat64, pointwise<double, &relu6_block<double>>)
      .writes_every_output_element().elementwise(&relu6_block<double>);
  r.add("Sigmoid", DType::kFloat32, pointwise<float, &sigmoid_block<float>>)
      .writes_every_output_element().elementwise(&sigmoid_block<float>);
  r.add("Sigmoid", DType::kFloat64, pointwise<double, &sigmoid_block<double>>)
      .writes_every_output_element().elementwise(&sigmoid_block<double>);
  r.add("Tanh", DType::kFloat32, pointwise<float, &tanh_block<float>>)
      .writes_every_output_element().elementwise(&tanh_block<float>);
  r.add("Tanh", DType::kFloat64, pointwise<double, &tanh_block<double>>)
      .writes_every_output_element().elementwise(&tanh_block<double>);
  r.add("GeLU", DType::kFloat32, pointwise<float, &gelu_block<float>>)
      .writes_every_output_element().elementwise();
  r.add("GeLU", DType::kFloat64, pointwise<double, &gelu_block<double>>)
      .writes_every_output_element().elementwise();
  r.add("Softmax", DType::kFloat32, softmax<float, false>);
  r.add("Softmax", DType::kFloat64, softmax<double, false>);
  r.add("LogSoftmax", DType::kFloat32, softmax<float, true>);
  r.add("LogSoftmax", DType::kFloat64, softmax<double, true>);
  r.add("Dropout", DType::kFloat32, dropout<float>);
  r.add("Dropout", DType::kFloat64, dropout<double>);
}

}  // namespace loom::backend
