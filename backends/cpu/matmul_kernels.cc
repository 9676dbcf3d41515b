// CPU kernels of the matrix-product family, Float32 and Float64.
//
// MatMul is one cpu::gemm call (small products on the calling thread with Eigen,
// cpu::gemm_for_shape). BatchMatMul runs one gemm per output matrix, locating each
// operand's matrix through broadcast batch strides; small matrices are spread over the pool
// (each gemm then runs on one thread), large ones run one after another with gemm's own
// threading. BiasAdd adds the bias along the channel axis; BiasAddGrad sums over every other
// axis, each channel summed by one task in a fixed order, so its result does not depend on the
// thread count.
#include <algorithm>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/cpu.h"
#include "backends/kernel.h"
#include "backends/thread_pool.h"

namespace loom::backend {

namespace {

constexpr std::int64_t kGrain = 16384;  // elements per parallel_for chunk of the simple loops

// MatMul's implementation is chosen by shape (cpu::gemm_for_shape): products of at most 25 MFLOP
// run with Eigen on loom's pool. The 9 MatMuls of a LeNet step at batch 32 (3 MFLOP and
// less) took 374-400 µs with OpenBLAS on 2 threads (its threads' wake-ups, and their spinning
// against the pool's workers on 2 cores), 150 µs on 1 thread, 150-160 µs now (bench/README.md).

template <typename T>
void matmul(const KernelContext& k) {
  const Tensor& a = k.in(0);
  const Tensor& b = k.in(1);
  Tensor& c = k.out(0);
  const bool ta = k.attr("transpose_a").as_bool();
  const bool tb = k.attr("transpose_b").as_bool();
  const std::int64_t m = c.dim(0), n = c.dim(1);
  const std::int64_t inner = ta ? a.dim(0) : a.dim(1);
  cpu::gemm(ta, tb, m, n, inner, T(1), a.data<T>(), std::max<std::int64_t>(1, a.dim(1)),
            b.data<T>(), std::max<std::int64_t>(1, b.dim(1)), T(0), c.data<T>(),
            std::max<std::int64_t>(1, n), cpu::gemm_for_shape(m, n, inner));
}

// Element offsets of matrix `index` (a flat index over the output's batch dims) in an operand
// whose batch dims broadcast to the output's.
class BatchOffsets {
 public:
  BatchOffsets(const Shape& operand, const Shape& out_batch) : out_batch_(out_batch) {
    const std::size_t rank = operand.size();
    const std::int64_t matrix = operand[rank - 2] * operand[rank - 1];
    const std::size_t lead = out_batch.size() - (rank - 2);
    strides_.assign(out_batch.size(), 0);
    std::int64_t stride = matrix;
    for (std::size_t i = rank - 2; i-- > 0;) {
      if (operand[i] != 1) strides_[i + lead] = stride;
      stride *= operand[i];
    }
  }

  std::int64_t operator()(std::int64_t index) const {
    std::int64_t offset = 0;
    for (std::size_t i = out_batch_.size(); i-- > 0;) {
      offset += (index % out_batch_[i]) * strides_[i];
      index /= out_batch_[i];
    }
    return offset;
  }

 private:
  Shape out_batch_;
  std::vector<std::int64_t> strides_;  // 0 along broadcast dims
};

// Below this m·n·k a gemm is cheap enough to give each matrix to one pool thread (OpenBLAS also
// runs products this small on one thread, so nothing oversubscribes).
constexpr std::int64_t kSmallProduct = 1 << 18;

template <typename T>
void batch_matmul(const KernelContext& k) {
  const Tensor& a = k.in(0);
  const Tensor& b = k.in(1);
  Tensor& c = k.out(0);
  const bool ta = k.attr("transpose_a").as_bool();
  const bool tb = k.attr("transpose_b").as_bool();
  const std::int64_t m = c.dim(-2), n = c.dim(-1);
  const std::int64_t inner = ta ? a.dim(-2) : a.dim(-1);
  const std::int64_t lda = std::max<std::int64_t>(1, a.dim(-1));
  const std::int64_t ldb = std::max<std::int64_t>(1, b.dim(-1));
  const Shape out_batch(c.shape().begin(), c.shape().end() - 2);
  const BatchOffsets a_offset(a.shape(), out_batch);
  const BatchOffsets b_offset(b.shape(), out_batch);
  const std::int64_t count = shape_numel(out_batch);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* pc = c.data<T>();
  auto one = [&](std::int64_t i) {
    cpu::gemm(ta, tb, m, n, inner, T(1), pa + a_offset(i), lda, pb + b_offset(i), ldb, T(0),
              pc + i * m * n, std::max<std::int64_t>(1, n));
  };
  const std::int64_t work = m * n * std::max<std::int64_t>(1, inner);
  if (work < kSmallProduct) {
    const std::int64_t grain = std::max<std::int64_t>(1, kSmallProduct / std::max<std::int64_t>(1, work));
    cpu::pool(k).parallel_for(count, grain, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) one(i);
    });
  } else {
    for (std::int64_t i = 0; i < count; ++i) one(i);
  }
}

// x viewed as (outer, channels, inner): the channel axis is 1, or the last axis for NHWC.
struct ChannelView {
  std::int64_t outer = 1, channels = 1, inner = 1;
};

ChannelView channel_view(const Shape& shape, const ir::Value& format) {
  const std::size_t axis = format.as_string() == "NHWC" ? shape.size() - 1 : 1;
  ChannelView v;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i < axis) v.outer *= shape[i];
    if (i == axis) v.channels = shape[i];
    if (i > axis) v.inner *= shape[i];
  }
  return v;
}

template <typename T>
void bias_add(const KernelContext& k) {
  const T* x = k.in(0).data<T>();
  const T* bias = k.in(1).data<T>();
  T* y = k.out(0).data<T>();
  const ChannelView v = channel_view(k.in(0).shape(), k.attr("format"));
  if (v.inner == 1) {
    // Rows of `channels` elements: the bias vector lines up with each row.
    const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, v.channels));
    cpu::pool(k).parallel_for(v.outer, grain, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t o = lo; o < hi; ++o) {
        const T* xr = x + o * v.channels;
        T* yr = y + o * v.channels;
        for (std::int64_t ch = 0; ch < v.channels; ++ch) yr[ch] = xr[ch] + bias[ch];
      }
    });
    return;
  }
  // Runs of `inner` elements, each getting one bias value.
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / v.inner);
  cpu::pool(k).parallel_for(v.outer * v.channels, grain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const T bv = bias[r % v.channels];
      const T* xr = x + r * v.inner;
      T* yr = y + r * v.inner;
      for (std::int64_t i = 0; i < v.inner; ++i) yr[i] = xr[i] + bv;
    }
  });
}

// Sum of a contiguous run in double, with eight independent partial sums (so it vectorizes)
// added in a fixed order.
template <typename T>
double sum_run(const T* p, std::int64_t n) {
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) lanes[l] += static_cast<double>(p[i + l]);
  }
  double s = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
             ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  for (; i < n; ++i) s += static_cast<double>(p[i]);
  return s;
}

template <typename T>
void bias_add_grad(const KernelContext& k) {
  const T* d = k.in(0).data<T>();
  T* out = k.out(0).data<T>();
  const ChannelView v = channel_view(k.in(0).shape(), k.attr("format"));
  const std::int64_t per_channel = std::max<std::int64_t>(1, v.outer * v.inner);
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / per_channel);
  cpu::pool(k).parallel_for(v.channels, grain, [&](std::int64_t lo, std::int64_t hi) {
    if (v.inner == 1) {
      // Channels are the contiguous axis: accumulate whole rows of this channel range.
      std::vector<double> acc(static_cast<std::size_t>(hi - lo), 0.0);
      for (std::int64_t o = 0; o < v.outer; ++o) {
        const T* row = d + o * v.channels + lo;
        for (std::int64_t ch = 0; ch < hi - lo; ++ch) acc[ch] += static_cast<double>(row[ch]);
      }
      for (std::int64_t ch = lo; ch < hi; ++ch) out[ch] = static_cast<T>(acc[ch - lo]);
      return;
    }
    for (std::int64_t ch = lo; ch < hi; ++ch) {
      double s = 0;
      for (std::int64_t o = 0; o < v.outer; ++o) {
        s += sum_run(d + (o * v.channels + ch) * v.inner, v.inner);
      }
      out[ch] = static_cast<T>(s);
    }
  });
}

}  // namespace

void register_cpu_matmul_kernels(KernelRegistry& r) {
  r.add("MatMul", DType::kFloat32, matmul<float>).writes_every_output_element();
  r.add("MatMul", DType::kFloat64, matmul<double>).writes_every_output_element();
  r.add("BatchMatMul", DType::kFloat32, batch_matmul<float>);
  r.add("BatchMatMul", DType::kFloat64, batch_matmul<double>);
  r.add("BiasAdd", DType::kFloat32, bias_add<float>).writes_every_output_element();
  r.add("BiasAdd", DType::kFloat64, bias_add<double>).writes_every_output_element();
  r.add("BiasAddGrad", DType::kFloat32, bias_add_grad<float>).writes_every_output_element();
  r.add("BiasAddGrad", DType::kFloat64, bias_add_grad<double>).writes_every_output_element();
}

}  // namespace loom::backend
