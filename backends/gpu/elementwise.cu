// CUDA kernels of the elementwise ops (arithmetic, comparisons, Select, the pointwise activations
// and ReluGrad, BiasAdd, Cast, ZerosLike / OnesLike / Fill, Dropout), FusedElementwise, and the
// array ops (Reshape, Flatten, ExpandDims, Squeeze, Transpose, Concat, Split, Slice, StridedSlice,
// StridedSliceGrad, Tile, BroadcastTo, Gather, GatherGrad, OneHot), under the CPU kernels' (op,
// dtype) keys and with the facts they declare.
//
// Elementwise ops are one grid-stride kernel each: a thread per output element, which reads
// element i of every input laid out like the output, so every such kernel may run in place.
// Broadcast inputs are read through NumPy's rules as the CPU's BroadcastPlan applies them
// (backends/cpu/elementwise.h): output dims merged where no input needs an index of its own,
// each input's element stride per merged dim (0 where it is broadcast), the output's flat index
// split into merged coordinates with 32-bit division whenever the output has fewer than 2^31
// elements. Each op's arithmetic is one __device__ functor with the CPU functor's operations
// (max and min let a NaN in x win, ReLU keeps NaN, Abs keeps -0, Sigmoid is
// (x >= 0 ? 1 : e) / (1 + e) with e = exp(-|x|), GeLU is x / (1 + exp(-2u))); floating add,
// sub, mul, div and sqrt round once each (device_math.cuh). Exp, Log, Tanh and Pow are CUDA's
// (within 2 ulps of the correctly rounded result, the CPU's Eigen versions within a few).
//
// Dropout draws Philox-4x32-10 on the device, the words core/random/philox.h gives on the host,
// a thread per block of four elements, so its mask is the CPU's.
//
// FusedElementwise runs its whole program in one kernel. prepare() decodes the program once per
// node into a compact table passed by value as a __grid_constant__ kernel parameter: an opcode
// and two operand slots per step (an input's value or a register, the registers allocated by
// liveness so a long chain needs few), and the broadcast strides of every input. Each thread
// takes four elements a block's width apart, loads them from every input, keeps the values and
// registers in its column of the block's shared memory (an interpreter indexes its operands at
// run time, and shared memory keeps that on chip), and decodes each step once for the four. The
// steps are the very functors the unfused kernels use, so a fused chain gives the bits the
// unfused kernels give. On an H100, Mul-Add-ReLU over three Float32 inputs of 16M elements took
// 109 µs (2.5 TB/s, a plain Add's rate), where its three unfused kernels take about 240 (81 µs
// for an Add of that size, 76 for a Sigmoid).
//
// Float16 and BFloat16 (mixed precision) have kernels for the ops the amp levels leave in the
// low dtype between the convolutions and products of a CNN: Add, Sub, Mul, Maximum, Minimum,
// Neg, Square, ReLU, ReLU6, ReluGrad and BiasAdd. Each element is widened to Float32, the
// Float32 functor applied and the result rounded once: the bits of the runtime's Float32
// fallback (Float32 kernel between widening and rounding Casts), in one pass over 16-bit data.
//
// The array ops are data movement by element size: one strided-copy kernel walks an output box
// in row-major order and reads (or, for StridedSliceGrad, writes) the other side through per-axis
// element strides, exactly the CPU's StridedBox (Transpose permutes strides, Slice offsets them,
// BroadcastTo and Tile use stride 0, Concat and Split copy into or out of a window); a box that
// is contiguous on both sides is one cudaMemcpyAsync. Where the CPU checks indices on the host
// (Gather, GatherGrad), the GPU cannot without waiting for the stream: an out-of-range index
// reads zeros (Gather) or adds nothing (GatherGrad) instead of raising ValueError. GatherGrad is
// deterministic: each thread owns one (outer, column) line of the gradient and adds the slices
// in index order, as the CPU does.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/gpu/cuda.h"
#include "backends/gpu/device_math.cuh"
#include "backends/gpu/half.cuh"
#include "backends/strided_box.h"
#include "core/ir/error.h"
#include "core/random/philox.h"
#include "ops/array_ops.h"
#include "ops/op.h"

namespace loom::backend::cuda {

namespace {

using std::int64_t;
using std::uint32_t;

// Outputs below this many elements index with 32-bit arithmetic.
constexpr int64_t kIndex32Limit = int64_t{1} << 31;

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t thread_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

void check_launch() { LOOM_CUDA_CHECK(cudaGetLastError()); }

// ---- Broadcast indexing -------------------------------------------------------------------

// Merged output dims (innermost last) and each input's element stride along them.
template <int N, int D>
struct Broadcast {
  int rank = 1;
  int64_t dims[D] = {};
  int64_t strides[N][D] = {};
};

constexpr int kMaxDims = 8;

// BroadcastPlan's merging (backends/cpu/elementwise.h) for `n` <= N inputs; InternalError when
// more than D merged dims remain.
template <int N, int D>
Broadcast<N, D> plan_broadcast(const Shape& out, const Shape* const* inputs, int n) {
  const std::size_t rank = out.size();
  std::vector<std::array<int64_t, N>> full(rank, std::array<int64_t, N>{});
  for (int k = 0; k < n; ++k) {
    const Shape& s = *inputs[k];
    int64_t stride = 1;
    for (std::size_t j = 0; j < s.size() && j < rank; ++j) {
      const int64_t d = s[s.size() - 1 - j];
      full[rank - 1 - j][static_cast<std::size_t>(k)] = d == 1 ? 0 : stride;
      stride *= d;
    }
  }
  std::vector<int64_t> dims;
  std::vector<std::array<int64_t, N>> strides;
  for (std::size_t d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    if (!dims.empty()) {
      bool merge = true;
      for (int k = 0; k < n; ++k) {
        const auto u = static_cast<std::size_t>(k);
        if (strides.back()[u] != full[d][u] * out[d]) merge = false;
      }
      if (merge) {
        dims.back() *= out[d];
        strides.back() = full[d];
        continue;
      }
    }
    dims.push_back(out[d]);
    strides.push_back(full[d]);
  }
  if (dims.empty()) {
    dims.push_back(1);
    strides.push_back(std::array<int64_t, N>{});
  }
  if (dims.size() > static_cast<std::size_t>(D)) {
    throw InternalError("CUDA elementwise: expected at most " + std::to_string(D) +
                        " broadcast dims after merging, got " + std::to_string(dims.size()) +
                        " for output " + shape_to_string(out));
  }
  Broadcast<N, D> b;
  b.rank = static_cast<int>(dims.size());
  for (std::size_t d = 0; d < dims.size(); ++d) {
    b.dims[d] = dims[d];
    for (int k = 0; k < N; ++k) b.strides[k][d] = strides[d][static_cast<std::size_t>(k)];
  }
  return b;
}

// Each input's offset for output element i.
template <int N, int D, typename I>
__device__ __forceinline__ void broadcast_offsets(const Broadcast<N, D>& b, I i, I (&off)[N]) {
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = b.rank - 1; d > 0; --d) {
    const auto dim = static_cast<I>(b.dims[d]);
    const I c = i % dim;
    i /= dim;
    for (int k = 0; k < N; ++k) off[k] += c * static_cast<I>(b.strides[k][d]);
  }
  for (int k = 0; k < N; ++k) off[k] += i * static_cast<I>(b.strides[k][0]);
}

// ---- Map kernels --------------------------------------------------------------------------
//
// F computes one output element: f.flat(i) from inputs laid out like the output, f.at(off)
// from each input's broadcast offset.

template <typename R, typename F>
__global__ void flat_kernel(R* y, int64_t n, F f) {
  for (int64_t i = global_thread(); i < n; i += thread_stride()) y[i] = f.flat(i);
}

template <int N, typename R, typename F, typename I>
__global__ void broadcast_kernel(R* y, I n, const __grid_constant__ Broadcast<N, kMaxDims> b,
                                 F f) {
  const auto stride = static_cast<I>(thread_stride());
  for (auto i = static_cast<I>(global_thread()); i < n; i += stride) {
    I off[N];
    broadcast_offsets(b, i, off);
    y[i] = f.at(off);
  }
}

// y (of shape `out`) from inputs of the given shapes through f.
template <int N, typename R, typename F>
void launch_map(const KernelContext& k, R* y, const Shape& out,
                const std::array<const Shape*, N>& shapes, F f) {
  const int64_t n = shape_numel(out);
  if (n == 0) return;
  const cudaStream_t stream = context(k).stream;
  bool same = true;
  for (const Shape* s : shapes) same = same && *s == out;
  if (same) {
    flat_kernel<R, F><<<blocks(n), kThreads, 0, stream>>>(y, n, f);
  } else {
    const auto b = plan_broadcast<N, kMaxDims>(out, shapes.data(), N);
    if (n < kIndex32Limit) {
      broadcast_kernel<N, R, F, uint32_t>
          <<<blocks(n), kThreads, 0, stream>>>(y, static_cast<uint32_t>(n), b, f);
    } else {
      broadcast_kernel<N, R, F, int64_t><<<blocks(n), kThreads, 0, stream>>>(y, n, b, f);
    }
  }
  check_launch();
}

// ---- Op functors --------------------------------------------------------------------------

struct AddOp {
  template <typename T> __device__ T operator()(T a, T b) const { return dm::add(a, b); }
};
struct SubOp {
  template <typename T> __device__ T operator()(T a, T b) const { return dm::sub(a, b); }
};
struct MulOp {
  template <typename T> __device__ T operator()(T a, T b) const { return dm::mul(a, b); }
};
struct DivOp {
  template <typename T> __device__ T operator()(T a, T b) const { return dm::div(a, b); }
};
struct PowOp {
  template <typename T> __device__ T operator()(T a, T b) const { return dm::pow(a, b); }
};
struct MaxOp {
  template <typename T> __device__ T operator()(T a, T b) const {
    if (dm::is_nan(a)) return a;  // NaN propagates, as in PyTorch and MindSpore
    return a > b ? a : b;
  }
};
struct MinOp {
  template <typename T> __device__ T operator()(T a, T b) const {
    if (dm::is_nan(a)) return a;
    return a < b ? a : b;
  }
};
struct EqualOp {
  template <typename T> __device__ bool operator()(T a, T b) const { return a == b; }
};
struct LessOp {
  template <typename T> __device__ bool operator()(T a, T b) const { return a < b; }
};
struct GreaterOp {
  template <typename T> __device__ bool operator()(T a, T b) const { return a > b; }
};

struct NegOp {
  template <typename T> __device__ T operator()(T x) const { return dm::neg(x); }
};
struct SquareOp {
  template <typename T> __device__ T operator()(T x) const { return dm::mul(x, x); }
};
struct AbsOp {
  template <typename T> __device__ T operator()(T x) const { return x < T(0) ? dm::neg(x) : x; }
};
struct SignOp {
  template <typename T> __device__ T operator()(T x) const {
    if constexpr (dm::kFloating<T>) {
      return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x);  // keeps 0 and NaN
    } else {
      return static_cast<T>((x > 0) - (x < 0));
    }
  }
};
struct SqrtOp {
  template <typename T> __device__ T operator()(T x) const { return dm::sqrt(x); }
};
struct RsqrtOp {
  template <typename T> __device__ T operator()(T x) const { return dm::div(T(1), dm::sqrt(x)); }
};
struct ExpOp {
  template <typename T> __device__ T operator()(T x) const { return dm::exp(x); }
};
struct LogOp {
  template <typename T> __device__ T operator()(T x) const { return dm::log(x); }
};
struct ReLUOp {
  template <typename T> __device__ T operator()(T x) const { return x < T(0) ? T(0) : x; }
};
struct ReLU6Op {
  template <typename T> __device__ T operator()(T x) const {
    return x < T(0) ? T(0) : (x > T(6) ? T(6) : x);
  }
};
struct SigmoidOp {
  template <typename T> __device__ T operator()(T x) const {
    const T e = dm::exp(-dm::fabs(x));
    return dm::div(x >= T(0) ? T(1) : e, dm::add(T(1), e));
  }
};
struct TanhOp {
  template <typename T> __device__ T operator()(T x) const { return dm::tanh(x); }
};
// x / (1 + exp(-2u)), -2u = -2 sqrt(2/pi) (x + 0.044715 x^3), in the CPU's order.
struct GeLUOp {
  template <typename T> __device__ T operator()(T x) const {
    const T minus_two_scale = T(-2 * 0.7978845608028654);
    const T cubic = T(0.044715);
    const T cube = dm::mul(dm::mul(x, x), x);
    const T z = dm::exp(dm::mul(minus_two_scale, dm::add(x, dm::mul(cubic, cube))));
    return dm::div(x, dm::add(T(1), z));
  }
};

// ---- Elementwise kernels ------------------------------------------------------------------

// A functor's result as the output element: rounded once for a 16-bit float output.
template <typename R, typename V>
__device__ __forceinline__ R result(V v) {
  if constexpr (kHalfStorage<R>) {
    return narrow<R>(v);
  } else {
    return v;
  }
}

template <typename T, typename R, typename Op>
struct BinaryFn {
  const T* a;
  const T* b;
  __device__ R flat(int64_t i) const { return result<R>(Op{}(widen(a[i]), widen(b[i]))); }
  template <typename I>
  __device__ R at(const I (&o)[2]) const {
    return result<R>(Op{}(widen(a[o[0]]), widen(b[o[1]])));
  }
};

template <typename Op, typename T, typename R = T>
void binary(const KernelContext& k) {
  Tensor& y = k.out(0);
  launch_map<2>(k, mutable_elements<R>(y), y.shape(), {&k.in(0).shape(), &k.in(1).shape()},
                BinaryFn<T, R, Op>{elements<T>(k.in(0)), elements<T>(k.in(1))});
}
template <typename Op, typename T>
void compare(const KernelContext& k) {
  binary<Op, T, bool>(k);
}

template <typename S, typename D, typename Op>
struct UnaryFn {
  const S* x;
  __device__ D flat(int64_t i) const { return result<D>(Op{}(widen(x[i]))); }
};

template <typename Op, typename T>
void unary(const KernelContext& k) {
  const int64_t n = k.out(0).numel();
  if (n == 0) return;
  flat_kernel<T, UnaryFn<T, T, Op>><<<blocks(n), kThreads, 0, context(k).stream>>>(
      mutable_elements<T>(k.out(0)), n, UnaryFn<T, T, Op>{elements<T>(k.in(0))});
  check_launch();
}

// dx = dout where y > 0, else +0 (a NaN in dout of a unit that is off gives 0).
template <typename T>
struct ReluGradFn {
  const T* dout;
  const T* y;
  __device__ T flat(int64_t i) const {
    using C = ComputeOf<T>;
    return result<T>(widen(y[i]) > C(0) ? widen(dout[i]) : C(0));
  }
};

template <typename T>
void relu_grad(const KernelContext& k) {
  const int64_t n = k.out(0).numel();
  if (n == 0) return;
  flat_kernel<T, ReluGradFn<T>><<<blocks(n), kThreads, 0, context(k).stream>>>(
      mutable_elements<T>(k.out(0)), n,
      ReluGradFn<T>{elements<T>(k.in(0)), elements<T>(k.in(1))});
  check_launch();
}

// Select moves bits, so one kernel per element size serves every value dtype.
template <typename U>
struct SelectFn {
  const bool* c;
  const U* a;
  const U* b;
  __device__ U flat(int64_t i) const { return c[i] ? a[i] : b[i]; }
  template <typename I>
  __device__ U at(const I (&o)[3]) const { return c[o[0]] ? a[o[1]] : b[o[2]]; }
};

template <typename U>
void select_sized(const KernelContext& k) {
  Tensor& y = k.out(0);
  launch_map<3>(k, static_cast<U*>(y.raw_data()), y.shape(),
                {&k.in(0).shape(), &k.in(1).shape(), &k.in(2).shape()},
                SelectFn<U>{k.in(0).data<bool>(), static_cast<const U*>(k.in(1).raw_data()),
                            static_cast<const U*>(k.in(2).raw_data())});
}

// Keyed by the value dtype (Select's kernel_dtype_from is input 1).
void select(const KernelContext& k) {
  switch (dtype_size(k.out(0).dtype())) {
    case 1: return select_sized<std::uint8_t>(k);
    case 4: return select_sized<std::uint32_t>(k);
    case 8: return select_sized<std::uint64_t>(k);
    default: break;
  }
  throw TypeError("Select: expected x and y with a CUDA kernel dtype, got " +
                  std::string(dtype_name(k.out(0).dtype())));
}

// BiasAdd: x + b with the rank-1 b along the channel axis (1, or the last for NHWC), as the
// broadcast Add of b viewed as (C, 1, ..., 1).
template <typename T>
void bias_add(const KernelContext& k) {
  const Tensor& x = k.in(0);
  const Tensor& b = k.in(1);
  Tensor& y = k.out(0);
  const std::size_t rank = x.shape().size();
  const std::size_t axis = k.attr("format").as_string() == "NHWC" ? rank - 1 : 1;
  Shape bias_shape = b.shape();
  if (axis < rank) {
    bias_shape.assign(rank - axis, 1);
    bias_shape[0] = x.shape()[axis];
  }
  launch_map<2>(k, mutable_elements<T>(y), y.shape(), {&x.shape(), &bias_shape},
                BinaryFn<T, T, AddOp>{elements<T>(x), elements<T>(b)});
}

// ---- Creation -----------------------------------------------------------------------------

template <typename T>
__global__ void fill_kernel(T* y, int64_t n, T value) {
  for (int64_t i = global_thread(); i < n; i += thread_stride()) y[i] = value;
}

template <typename T>
void fill_with(const KernelContext& k, T value) {
  const int64_t n = k.out(0).numel();
  if (n == 0) return;
  fill_kernel<T><<<blocks(n), kThreads, 0, context(k).stream>>>(k.out(0).data<T>(), n, value);
  check_launch();
}

void zeros_like(const KernelContext& k) {
  // Zero bytes are zero in every dtype (+0.0 for the floating ones).
  if (k.out(0).nbytes() > 0) {
    LOOM_CUDA_CHECK(
        cudaMemsetAsync(k.out(0).raw_data(), 0, k.out(0).nbytes(), context(k).stream));
  }
}
template <typename T>
void ones_like(const KernelContext& k) {
  fill_with<T>(k, T(1));
}

template <typename T>
void fill(const KernelContext& k) {
  const double v = k.attr("value").as_double();
  if constexpr (std::is_same_v<T, bool>) {
    fill_with<bool>(k, v != 0);
  } else {
    fill_with<T>(k, static_cast<T>(v));
  }
}

// ---- Cast ---------------------------------------------------------------------------------

template <typename S, typename D>
__device__ __forceinline__ D convert(S x) {
  if constexpr (std::is_same_v<D, bool>) {
    return x != S(0);
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    // Through Int64 so that UInt8 wraps like an integer conversion.
    return static_cast<D>(static_cast<int64_t>(x));
  } else {
    return static_cast<D>(x);
  }
}

template <typename S, typename D>
struct CastFn {
  const S* x;
  __device__ D flat(int64_t i) const { return convert<S, D>(x[i]); }
};

template <typename S, typename D>
void cast_to(const KernelContext& k) {
  const int64_t n = k.out(0).numel();
  if (n == 0) return;
  if constexpr (std::is_same_v<S, D>) {
    if (k.in(0).raw_data() != k.out(0).raw_data()) {
      LOOM_CUDA_CHECK(cudaMemcpyAsync(k.out(0).raw_data(), k.in(0).raw_data(), k.out(0).nbytes(),
                                      cudaMemcpyDeviceToDevice, context(k).stream));
    }
  } else {
    flat_kernel<D, CastFn<S, D>><<<blocks(n), kThreads, 0, context(k).stream>>>(
        k.out(0).data<D>(), n, CastFn<S, D>{k.in(0).data<S>()});
    check_launch();
  }
}

// Float16 and BFloat16 tensors hold 16-bit patterns: converted through Float32, rounding to
// nearest even, as the CPU's Cast (core/ir/dtype.h).
__device__ __forceinline__ uint16_t to_bits(float f, bool bf16) {
  return bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(f)) : __half_as_ushort(__float2half_rn(f));
}
__device__ __forceinline__ float from_bits(uint16_t b, bool bf16) {
  return bf16 ? __bfloat162float(__ushort_as_bfloat16(b)) : __half2float(__ushort_as_half(b));
}

template <typename S>
struct CastToBitsFn {
  const S* x;
  bool bf16;
  __device__ uint16_t flat(int64_t i) const { return to_bits(static_cast<float>(x[i]), bf16); }
};

template <typename D>
struct CastFromBitsFn {
  const uint16_t* x;
  bool from_bf16, to_bf16;  // to_bf16: only for a 16-bit D
  __device__ D flat(int64_t i) const {
    const float v = from_bits(x[i], from_bf16);
    if constexpr (std::is_same_v<D, uint16_t>) {
      return to_bits(v, to_bf16);
    } else {
      return convert<float, D>(v);
    }
  }
};

template <typename S>
void cast_to_bits(const KernelContext& k) {
  const int64_t n = k.out(0).numel();
  if (n == 0) return;
  auto* y = static_cast<uint16_t*>(k.out(0).raw_data());
  const CastToBitsFn<S> fn{k.in(0).data<S>(), k.out(0).dtype() == DType::kBFloat16};
  flat_kernel<uint16_t, CastToBitsFn<S>><<<blocks(n), kThreads, 0, context(k).stream>>>(y, n, fn);
  check_launch();
}

template <typename D>
void cast_bits_to(const KernelContext& k, D* y) {
  const int64_t n = k.out(0).numel();
  if (n == 0) return;
  const CastFromBitsFn<D> fn{static_cast<const uint16_t*>(k.in(0).raw_data()),
                             k.in(0).dtype() == DType::kBFloat16,
                             k.out(0).dtype() == DType::kBFloat16};
  flat_kernel<D, CastFromBitsFn<D>><<<blocks(n), kThreads, 0, context(k).stream>>>(y, n, fn);
  check_launch();
}

// Cast from Float16 or BFloat16 (keyed by the source dtype).
void cast_from_bits(const KernelContext& k) {
  switch (k.out(0).dtype()) {
    case DType::kFloat32: return cast_bits_to<float>(k, k.out(0).data<float>());
    case DType::kFloat64: return cast_bits_to<double>(k, k.out(0).data<double>());
    case DType::kInt32: return cast_bits_to<std::int32_t>(k, k.out(0).data<std::int32_t>());
    case DType::kInt64: return cast_bits_to<std::int64_t>(k, k.out(0).data<std::int64_t>());
    case DType::kUInt8: return cast_bits_to<std::uint8_t>(k, k.out(0).data<std::uint8_t>());
    case DType::kBool: return cast_bits_to<bool>(k, k.out(0).data<bool>());
    case DType::kFloat16:
    case DType::kBFloat16:
      return cast_bits_to<uint16_t>(k, static_cast<uint16_t*>(k.out(0).raw_data()));
    default: break;
  }
  throw TypeError("Cast: expected a dst_type with a CUDA kernel, got " +
                  std::string(dtype_name(k.out(0).dtype())));
}

template <typename S>
void cast(const KernelContext& k) {
  switch (k.out(0).dtype()) {
    case DType::kFloat16:
    case DType::kBFloat16: return cast_to_bits<S>(k);
    case DType::kFloat32: return cast_to<S, float>(k);
    case DType::kFloat64: return cast_to<S, double>(k);
    case DType::kInt32: return cast_to<S, std::int32_t>(k);
    case DType::kInt64: return cast_to<S, std::int64_t>(k);
    case DType::kUInt8: return cast_to<S, std::uint8_t>(k);
    case DType::kBool: return cast_to<S, bool>(k);
    default: break;
  }
  throw TypeError("Cast: expected a dst_type with a CUDA kernel, got " +
                  std::string(dtype_name(k.out(0).dtype())));
}

// ---- Dropout ------------------------------------------------------------------------------

// Philox-4x32-10 (core/random/philox.h) on the device: block `index` of the stream (seed,
// stream), the same four words philox::stream_block gives on the host.
struct Words {
  uint32_t w[4];
};

__device__ __forceinline__ Words philox_stream_block(std::uint64_t seed, std::uint64_t stream,
                                                     std::uint64_t index) {
  using namespace random::philox;
  uint32_t c0 = static_cast<uint32_t>(index), c1 = static_cast<uint32_t>(index >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < kRounds; ++r) {
    if (r > 0) {
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    const uint32_t hi0 = __umulhi(kMultiplier0, c0), lo0 = kMultiplier0 * c0;
    const uint32_t hi1 = __umulhi(kMultiplier1, c2), lo1 = kMultiplier1 * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0;
    const uint32_t n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return Words{{c0, c1, c2, c3}};
}

// Four consecutive elements, loaded and stored as one (vector) access where aligned.
template <typename T>
struct alignas(4 * sizeof(T)) Quad {
  T v[4];
};

// Element i takes word i % 4 of block i / 4; a thread per block of four elements, read and
// written as Quads when kAligned (every pointer aligned to a Quad).
template <typename T, bool kAligned>
__global__ void dropout_kernel(const T* x, const int64_t* key, T* y, T* mask, int64_t n,
                               uint32_t bound, T scale) {
  const auto seed = static_cast<std::uint64_t>(key[0]);
  const auto stream = static_cast<std::uint64_t>(key[1]);
  const int64_t groups = (n + 3) / 4;
  for (int64_t g = global_thread(); g < groups; g += thread_stride()) {
    const Words r = philox_stream_block(seed, stream, static_cast<std::uint64_t>(g));
    T m[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) m[w] = (r.w[w] >> 8) < bound ? T(1) : T(0);
    // x * mask, not a select: NaN and inf in dropped units give NaN, as on the CPU.
    if (kAligned && 4 * g + 4 <= n) {
      const Quad<T> xs = reinterpret_cast<const Quad<T>*>(x)[g];
      Quad<T> ys, ms;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        ms.v[w] = m[w];
        ys.v[w] = dm::mul(dm::mul(xs.v[w], m[w]), scale);
      }
      reinterpret_cast<Quad<T>*>(y)[g] = ys;
      reinterpret_cast<Quad<T>*>(mask)[g] = ms;
      continue;
    }
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int64_t e = 4 * g + w;
      if (e < n) {
        mask[e] = m[w];
        y[e] = dm::mul(dm::mul(x[e], m[w]), scale);
      }
    }
  }
}

template <typename T>
void dropout(const KernelContext& k) {
  const int64_t n = k.out(0).numel();
  if (n == 0) return;
  const double keep_prob = k.attr("keep_prob").as_double();
  const uint32_t bound = random::philox::uniform01_bound(keep_prob);
  const T scale = static_cast<T>(1.0 / keep_prob);
  const T* x = k.in(0).data<T>();
  T* y = k.out(0).data<T>();
  T* mask = k.out(1).data<T>();
  const auto address = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  const bool aligned = ((address(x) | address(y) | address(mask)) % sizeof(Quad<T>)) == 0;
  const unsigned grid = blocks((n + 3) / 4);
  const cudaStream_t stream = context(k).stream;
  if (aligned) {
    dropout_kernel<T, true><<<grid, kThreads, 0, stream>>>(x, k.in(1).data<int64_t>(), y, mask, n,
                                                           bound, scale);
  } else {
    dropout_kernel<T, false><<<grid, kThreads, 0, stream>>>(x, k.in(1).data<int64_t>(), y, mask,
                                                            n, bound, scale);
  }
  check_launch();
}

// ---- FusedElementwise ---------------------------------------------------------------------

enum FusedCode : std::uint8_t {
  kFAdd, kFSub, kFMul, kFRealDiv, kFPow, kFMaximum, kFMinimum,  // binary
  kFNeg, kFSquare, kFAbs, kFSign, kFSqrt, kFRsqrt, kFExp, kFLog,
  kFReLU, kFReLU6, kFSigmoid, kFTanh, kFGeLU,                   // unary
};

struct FusedOpName {
  std::string_view name;
  FusedCode code;
  int arity;
};

// Every op a step may name: the fusable ops (ops/*.cc, OpDef::fusable) and the other floating
// elementwise ops with a kernel here, so marking one fusable later needs no change in this file.
constexpr FusedOpName kFusedOps[] = {
    {"Add", kFAdd, 2},        {"Sub", kFSub, 2},         {"Mul", kFMul, 2},
    {"RealDiv", kFRealDiv, 2}, {"Pow", kFPow, 2},        {"Maximum", kFMaximum, 2},
    {"Minimum", kFMinimum, 2}, {"Neg", kFNeg, 1},        {"Square", kFSquare, 1},
    {"Abs", kFAbs, 1},        {"Sign", kFSign, 1},       {"Sqrt", kFSqrt, 1},
    {"Rsqrt", kFRsqrt, 1},    {"Exp", kFExp, 1},         {"Log", kFLog, 1},
    {"ReLU", kFReLU, 1},      {"ReLU6", kFReLU6, 1},     {"Sigmoid", kFSigmoid, 1},
    {"Tanh", kFTanh, 1},      {"GeLU", kFGeLU, 1},
};

// Limits of one fused program (the kernel parameter stays under 4 KiB).
constexpr int kFusedInputs = 24;
constexpr int kFusedDims = 8;
constexpr int kFusedSteps = 128;
constexpr int kFusedRegisters = 16;
constexpr std::int16_t kNoOperand = INT16_MIN;
// Shared memory a block of the fused kernel may take for its slots.
constexpr std::size_t kFusedSharedBytes = 48 * 1024;

// A step: slot[dst] = op(slot[a], slot[b]). Slots 0 .. num_inputs - 1 hold the inputs' values,
// the next ones the registers that carry step results.
struct FusedStepCode {
  std::uint8_t code;
  std::uint8_t dst;
  std::int16_t a;
  std::int16_t b;  // kNoOperand for unary ops
};

struct FusedArgs {
  const void* inputs[kFusedInputs];
  int64_t dims[kFusedDims];                   // merged output dims, innermost last
  int64_t strides[kFusedInputs][kFusedDims];  // per broadcast input, 0 where broadcast
  FusedStepCode steps[kFusedSteps];
  int num_inputs;
  int num_steps;
  int num_slots;       // inputs and registers
  int rank;
  uint32_t broadcast;  // bit k: input k is broadcast (else read at the output index)
};
static_assert(sizeof(FusedArgs) <= 4096, "FusedElementwise's kernel parameter must stay small");

// Elements a thread of the fused kernel evaluates together (a step is decoded once for all).
constexpr int kFusedPerThread = 4;

template <typename T>
using FusedLanes = T[kFusedPerThread];

template <typename Op, typename T>
__device__ __forceinline__ void each(const FusedLanes<T>& a, const FusedLanes<T>& b,
                                     FusedLanes<T>& r) {
#pragma unroll
  for (int j = 0; j < kFusedPerThread; ++j) {
    if constexpr (std::is_invocable_v<Op, T, T>) {
      r[j] = Op{}(a[j], b[j]);
    } else {
      r[j] = Op{}(a[j]);
    }
  }
}

// r = op(a, b) (op(a) for a unary op), lane by lane.
template <typename T>
__device__ __forceinline__ void fused_apply(std::uint8_t code, const FusedLanes<T>& a,
                                            const FusedLanes<T>& b, FusedLanes<T>& r) {
  switch (code) {
    case kFAdd: return each<AddOp>(a, b, r);
    case kFSub: return each<SubOp>(a, b, r);
    case kFMul: return each<MulOp>(a, b, r);
    case kFRealDiv: return each<DivOp>(a, b, r);
    case kFPow: return each<PowOp>(a, b, r);
    case kFMaximum: return each<MaxOp>(a, b, r);
    case kFMinimum: return each<MinOp>(a, b, r);
    case kFNeg: return each<NegOp>(a, b, r);
    case kFSquare: return each<SquareOp>(a, b, r);
    case kFAbs: return each<AbsOp>(a, b, r);
    case kFSign: return each<SignOp>(a, b, r);
    case kFSqrt: return each<SqrtOp>(a, b, r);
    case kFRsqrt: return each<RsqrtOp>(a, b, r);
    case kFExp: return each<ExpOp>(a, b, r);
    case kFLog: return each<LogOp>(a, b, r);
    case kFReLU: return each<ReLUOp>(a, b, r);
    case kFReLU6: return each<ReLU6Op>(a, b, r);
    case kFSigmoid: return each<SigmoidOp>(a, b, r);
    case kFTanh: return each<TanhOp>(a, b, r);
    case kFGeLU: return each<GeLUOp>(a, b, r);
    default: break;
  }
}

// Each thread evaluates kFusedPerThread elements, blockDim.x apart (so every access is
// coalesced), decoding each step once for all of them: it loads its elements of each input (the
// loads of one input in flight together), stores them to its column of the block's shared-memory
// slots, then runs the steps on the slots. An interpreter's operands are indexed at run time,
// and shared memory is where that stays on chip.
template <typename T, typename I>
__global__ void __launch_bounds__(kThreads) fused_kernel(const __grid_constant__ FusedArgs p, T* y,
                                                        I n) {
  constexpr int E = kFusedPerThread;
  extern __shared__ __align__(16) unsigned char fused_shared[];
  const unsigned width = blockDim.x;
  // Slot s of element j at slot[(s * E + j) * width].
  T* slot = reinterpret_cast<T*>(fused_shared) + threadIdx.x;
  const I tile = static_cast<I>(width) * E;
  const I grid_stride = static_cast<I>(gridDim.x) * tile;
  for (I base = static_cast<I>(blockIdx.x) * tile + threadIdx.x; base < n; base += grid_stride) {
    I at[E];
    bool live[E];
#pragma unroll
    for (int j = 0; j < E; ++j) {
      at[j] = base + static_cast<I>(j) * static_cast<I>(width);
      live[j] = at[j] < n;
    }
#pragma unroll 1
    for (int k = 0; k < p.num_inputs; ++k) {
      const T* x = static_cast<const T*>(p.inputs[k]);
      const bool broadcast = (p.broadcast >> k) & 1u;
      T v[E];
#pragma unroll
      for (int j = 0; j < E; ++j) {
        I off = at[j];
        if (broadcast) {
          // The element's merged coordinates, each times the input's stride.
          I rest = at[j];
          off = 0;
#pragma unroll 1
          for (int d = p.rank - 1; d > 0; --d) {
            const auto dim = static_cast<I>(p.dims[d]);
            off += (rest % dim) * static_cast<I>(p.strides[k][d]);
            rest /= dim;
          }
          off += rest * static_cast<I>(p.strides[k][0]);
        }
        v[j] = live[j] ? x[off] : T(0);
      }
#pragma unroll
      for (int j = 0; j < E; ++j) slot[(k * E + j) * width] = v[j];
    }
    T r[E] = {};
    for (int s = 0; s < p.num_steps; ++s) {
      const FusedStepCode c = p.steps[s];
      T a[E], b[E] = {};
#pragma unroll
      for (int j = 0; j < E; ++j) a[j] = slot[(c.a * E + j) * width];
      if (c.b != kNoOperand) {
#pragma unroll
        for (int j = 0; j < E; ++j) b[j] = slot[(c.b * E + j) * width];
      }
      fused_apply<T>(c.code, a, b, r);
#pragma unroll
      for (int j = 0; j < E; ++j) slot[(c.dst * E + j) * width] = r[j];
    }
#pragma unroll
    for (int j = 0; j < E; ++j) {
      if (live[j]) y[at[j]] = r[j];
    }
  }
}

// The program decoded once per node; the input addresses are filled in at each launch.
struct FusedPlan {
  FusedArgs args;
};

[[noreturn]] void fused_limit(const std::string& what) {
  throw InternalError("FusedElementwise: expected a program within the CUDA kernel's limits, "
                      "got " + what);
}

Prepared prepare_fused_elementwise(const PrepareContext& c) {
  const std::size_t num_inputs = c.inputs.size();
  const std::vector<ops::FusedStep> steps = ops::fused_program(c.attr("program"), num_inputs);
  if (num_inputs > static_cast<std::size_t>(kFusedInputs)) {
    fused_limit(std::to_string(num_inputs) + " inputs (at most " + std::to_string(kFusedInputs) +
                ")");
  }
  if (steps.size() > static_cast<std::size_t>(kFusedSteps)) {
    fused_limit(std::to_string(steps.size()) + " steps (at most " + std::to_string(kFusedSteps) +
                ")");
  }
  auto plan = std::make_shared<FusedPlan>();
  FusedArgs& a = plan->args;
  std::memset(&a, 0, sizeof a);
  a.num_steps = static_cast<int>(steps.size());
  a.num_inputs = static_cast<int>(num_inputs);

  // The step that reads each step's value last (-1: none).
  std::vector<int> last_use(steps.size(), -1);
  for (std::size_t s = 0; s < steps.size(); ++s) {
    for (std::size_t v : steps[s].operands) {
      if (v >= num_inputs) last_use[v - num_inputs] = static_cast<int>(s);
    }
  }
  std::vector<int> reg_of(steps.size(), -1);
  int registers = 0;
  std::vector<bool> busy(kFusedRegisters, false);
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const ops::FusedStep& st = steps[s];
    const FusedOpName* op = nullptr;
    for (const FusedOpName& o : kFusedOps) {
      if (o.name == st.op) op = &o;
    }
    if (op == nullptr || static_cast<std::size_t>(op->arity) != st.operands.size()) {
      throw InternalError("FusedElementwise: expected steps of ops with a CUDA fused form, got '" +
                          st.op + "'");
    }
    auto operand = [&](std::size_t v) -> std::int16_t {
      if (v < num_inputs) return static_cast<std::int16_t>(v);
      return static_cast<std::int16_t>(num_inputs + static_cast<std::size_t>(reg_of[v - num_inputs]));
    };
    FusedStepCode& code = a.steps[s];
    code.code = op->code;
    code.a = operand(st.operands[0]);
    code.b = op->arity == 2 ? operand(st.operands[1]) : kNoOperand;
    // Operands read for the last time free their registers, which this step's result may take
    // (a step reads its operands before it writes).
    for (std::size_t v : st.operands) {
      if (v >= num_inputs && last_use[v - num_inputs] == static_cast<int>(s)) {
        busy[static_cast<std::size_t>(reg_of[v - num_inputs])] = false;
      }
    }
    const auto free = std::find(busy.begin(), busy.end(), false);
    if (free == busy.end()) {
      fused_limit("a program needing more than " + std::to_string(kFusedRegisters) +
                  " live values");
    }
    reg_of[s] = static_cast<int>(free - busy.begin());
    code.dst = static_cast<std::uint8_t>(num_inputs + static_cast<std::size_t>(reg_of[s]));
    registers = std::max(registers, reg_of[s] + 1);
    // The register stays taken until the value's last reader; a value nobody reads (the last
    // step's, which goes to the output) leaves it free.
    if (last_use[s] >= 0) *free = true;
  }

  a.num_slots = a.num_inputs + registers;

  const Shape& out = c.outputs[0].shape;
  std::vector<const Shape*> shapes;
  std::vector<std::size_t> broadcast_inputs;
  for (std::size_t k = 0; k < num_inputs; ++k) {
    if (c.inputs[k].shape == out) continue;
    a.broadcast |= 1u << k;
    shapes.push_back(&c.inputs[k].shape);
    broadcast_inputs.push_back(k);
  }
  a.rank = 1;
  if (!shapes.empty()) {
    const auto b = plan_broadcast<kFusedInputs, kFusedDims>(out, shapes.data(),
                                                            static_cast<int>(shapes.size()));
    a.rank = b.rank;
    for (int d = 0; d < b.rank; ++d) a.dims[d] = b.dims[d];
    for (std::size_t j = 0; j < broadcast_inputs.size(); ++j) {
      for (int d = 0; d < b.rank; ++d) a.strides[broadcast_inputs[j]][d] = b.strides[j][d];
    }
  }
  return Prepared{std::move(plan), 0};
}

template <typename T>
void fused_elementwise(const KernelContext& k) {
  const int64_t n = k.out(0).numel();
  if (n == 0) return;
  FusedArgs a = k.state<FusedPlan>().args;
  for (std::size_t i = 0; i < k.inputs.size(); ++i) a.inputs[i] = k.in(i).raw_data();
  const cudaStream_t stream = context(k).stream;
  T* y = k.out(0).data<T>();
  // kThreads a block, fewer where the slots would not fit in kFusedSharedBytes.
  const std::size_t per_thread = static_cast<std::size_t>(a.num_slots) * kFusedPerThread * sizeof(T);
  int threads = kThreads;
  while (threads > 32 && per_thread * static_cast<std::size_t>(threads) > kFusedSharedBytes) {
    threads /= 2;
  }
  const std::size_t shared = per_thread * static_cast<std::size_t>(threads);
  const int64_t tile = int64_t{threads} * kFusedPerThread;
  const auto grid = static_cast<unsigned>(
      std::min<int64_t>((n + tile - 1) / tile, (int64_t{1} << 30) / tile));
  if (n < kIndex32Limit) {
    fused_kernel<T, uint32_t><<<grid, threads, shared, stream>>>(a, y, static_cast<uint32_t>(n));
  } else {
    fused_kernel<T, int64_t><<<grid, threads, shared, stream>>>(a, y, n);
  }
  check_launch();
}

// ---- Array ops: strided copies (the boxes: backends/strided_box.h) ---------------------------

constexpr int kCopyDims = 16;

struct CopyBox {
  int rank;
  int64_t dims[kCopyDims];
  int64_t src[kCopyDims];
  int64_t dst[kCopyDims];
};

template <typename E, typename I>
__global__ void strided_copy_kernel(const E* src, E* dst, I n, const __grid_constant__ CopyBox b) {
  const auto stride = static_cast<I>(thread_stride());
  for (auto i = static_cast<I>(global_thread()); i < n; i += stride) {
    I rest = i;
    int64_t so = 0, d = 0;
    for (int k = b.rank - 1; k > 0; --k) {
      const auto dim = static_cast<I>(b.dims[k]);
      const auto c = static_cast<int64_t>(rest % dim);
      rest /= dim;
      so += c * b.src[k];
      d += c * b.dst[k];
    }
    so += static_cast<int64_t>(rest) * b.src[0];
    d += static_cast<int64_t>(rest) * b.dst[0];
    dst[d] = src[so];
  }
}

template <typename E>
void strided_copy_typed(const void* src, void* dst, const CopyBox& b, int64_t n,
                        cudaStream_t stream) {
  const auto* s = static_cast<const E*>(src);
  auto* d = static_cast<E*>(dst);
  if (n < kIndex32Limit) {
    strided_copy_kernel<E, uint32_t><<<blocks(n), kThreads, 0, stream>>>(
        s, d, static_cast<uint32_t>(n), b);
  } else {
    strided_copy_kernel<E, int64_t><<<blocks(n), kThreads, 0, stream>>>(s, d, n, b);
  }
  check_launch();
}

// Copies the box; src and dst point at the box's first element on each side.
void strided_copy(const KernelContext& k, const void* src, void* dst, std::size_t elem_size,
                  const StridedBox& box) {
  for (int64_t d : box.shape) {
    if (d == 0) return;
  }
  const StridedBox s = simplify(box);
  int64_t n = 1;
  for (int64_t d : s.shape) n *= d;
  const cudaStream_t stream = context(k).stream;
  if (s.shape.size() == 1 && s.src_stride[0] == 1 && s.dst_stride[0] == 1) {
    if (src != dst) {
      LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * elem_size,
                                      cudaMemcpyDeviceToDevice, stream));
    }
    return;
  }
  if (s.shape.size() > static_cast<std::size_t>(kCopyDims)) {
    throw InternalError("CUDA array kernels: expected at most " + std::to_string(kCopyDims) +
                        " dims after merging, got " + std::to_string(s.shape.size()));
  }
  CopyBox b{};
  b.rank = static_cast<int>(s.shape.size());
  for (std::size_t i = 0; i < s.shape.size(); ++i) {
    b.dims[i] = s.shape[i];
    b.src[i] = s.src_stride[i];
    b.dst[i] = s.dst_stride[i];
  }
  switch (elem_size) {
    case 1: return strided_copy_typed<std::uint8_t>(src, dst, b, n, stream);
    case 2: return strided_copy_typed<std::uint16_t>(src, dst, b, n, stream);
    case 4: return strided_copy_typed<std::uint32_t>(src, dst, b, n, stream);
    case 8: return strided_copy_typed<std::uint64_t>(src, dst, b, n, stream);
    default: break;
  }
  throw InternalError("CUDA array kernels: expected an element size of 1, 2, 4 or 8, got " +
                      std::to_string(elem_size));
}

std::size_t elem_size(const Tensor& t) { return dtype_size(t.dtype()); }

const char* byte_ptr(const Tensor& t, int64_t elements) {
  return static_cast<const char*>(t.raw_data()) + elements * static_cast<int64_t>(elem_size(t));
}
char* byte_ptr(Tensor& t, int64_t elements) {
  return static_cast<char*>(t.raw_data()) + elements * static_cast<int64_t>(elem_size(t));
}

// Reshape, Flatten, ExpandDims, Squeeze: the bytes are unchanged.
void copy_kernel(const KernelContext& k) {
  const void* s = k.in(0).raw_data();
  void* d = k.out(0).raw_data();
  if (s == d || k.in(0).nbytes() == 0) return;  // a donated buffer already holds the bytes
  LOOM_CUDA_CHECK(
      cudaMemcpyAsync(d, s, k.in(0).nbytes(), cudaMemcpyDeviceToDevice, context(k).stream));
}

void transpose_kernel(const KernelContext& k) {
  const Tensor& x = k.in(0);
  Tensor& y = k.out(0);
  const Ints xs = contiguous_strides(x.shape());
  StridedBox box{y.shape(), {}, contiguous_strides(y.shape())};
  for (int64_t p : k.attr("perm").as_ints()) {
    if (p < 0) p += x.rank();
    box.src_stride.push_back(xs[static_cast<std::size_t>(p)]);
  }
  strided_copy(k, x.raw_data(), y.raw_data(), elem_size(x), box);
}

// Concat and Split: each part is a window of the whole along `axis`.
void concat_kernel(const KernelContext& k) {
  Tensor& y = k.out(0);
  const auto axis = static_cast<std::size_t>(normalized_axis(k.attr("axis").as_int(), y.rank()));
  const Ints ys = contiguous_strides(y.shape());
  int64_t offset = 0;
  for (const Tensor& x : k.inputs) {
    const StridedBox box{x.shape(), contiguous_strides(x.shape()), ys};
    strided_copy(k, x.raw_data(), byte_ptr(y, offset * ys[axis]), elem_size(y), box);
    offset += x.shape()[axis];
  }
}

void split_kernel(const KernelContext& k) {
  const Tensor& x = k.in(0);
  const auto axis = static_cast<std::size_t>(normalized_axis(k.attr("axis").as_int(), x.rank()));
  const Ints xs = contiguous_strides(x.shape());
  int64_t offset = 0;
  for (Tensor& y : k.outputs) {
    const StridedBox box{y.shape(), xs, contiguous_strides(y.shape())};
    strided_copy(k, byte_ptr(x, offset * xs[axis]), y.raw_data(), elem_size(x), box);
    offset += y.shape()[axis];
  }
}

void slice_kernel(const KernelContext& k) {
  const Tensor& x = k.in(0);
  Tensor& y = k.out(0);
  const Ints xs = contiguous_strides(x.shape());
  const int64_t start = offset_of(k.attr("begin").as_ints(), xs);
  const StridedBox box{y.shape(), xs, contiguous_strides(y.shape())};
  strided_copy(k, byte_ptr(x, start), y.raw_data(), elem_size(x), box);
}

void strided_slice_kernel(const KernelContext& k) {
  const Tensor& x = k.in(0);
  int64_t start = 0;
  const StridedBox box = strided_slice_box(x.shape(), k, start);
  strided_copy(k, byte_ptr(x, start), k.out(0).raw_data(), elem_size(x), box);
}

void strided_slice_grad_kernel(const KernelContext& k) {
  const Tensor& dout = k.in(0);
  Tensor& dx = k.out(0);
  if (dx.nbytes() > 0) {
    LOOM_CUDA_CHECK(cudaMemsetAsync(dx.raw_data(), 0, dx.nbytes(), context(k).stream));
  }
  int64_t start = 0;
  StridedBox box = strided_slice_box(dx.shape(), k, start);
  std::swap(box.src_stride, box.dst_stride);
  strided_copy(k, dout.raw_data(), byte_ptr(dx, start), elem_size(dx), box);
}

void tile_kernel(const KernelContext& k) {
  const Tensor& x = k.in(0);
  Tensor& y = k.out(0);
  Shape s = x.shape();
  Ints m = k.attr("multiples").as_ints();
  if (s.size() < m.size()) s.insert(s.begin(), m.size() - s.size(), 1);
  if (m.size() < s.size()) m.insert(m.begin(), s.size() - m.size(), 1);
  const Ints xs = contiguous_strides(s);
  StridedBox box;
  for (std::size_t i = 0; i < s.size(); ++i) {
    box.shape.push_back(m[i]);
    box.src_stride.push_back(0);
    box.shape.push_back(s[i]);
    box.src_stride.push_back(xs[i]);
  }
  box.dst_stride = contiguous_strides(box.shape);
  strided_copy(k, x.raw_data(), y.raw_data(), elem_size(x), box);
}

void broadcast_to_kernel(const KernelContext& k) {
  const Tensor& x = k.in(0);
  Tensor& y = k.out(0);
  const Ints xs = contiguous_strides(x.shape());
  const std::size_t lead = y.shape().size() - x.shape().size();
  StridedBox box{y.shape(), Ints(y.shape().size(), 0), contiguous_strides(y.shape())};
  for (std::size_t i = 0; i < x.shape().size(); ++i) {
    if (x.shape()[i] != 1) box.src_stride[lead + i] = xs[i];
  }
  strided_copy(k, x.raw_data(), y.raw_data(), elem_size(x), box);
}

// ---- Gather, GatherGrad, OneHot -----------------------------------------------------------

// y (outer, count, row) = params (outer, n, row) at the indices along the middle axis; rows in
// elements of E.
template <typename E, typename Idx>
__global__ void gather_kernel(const E* params, const Idx* idx, E* y, int64_t n, int64_t count,
                              int64_t row, int64_t total) {
  for (int64_t t = global_thread(); t < total; t += thread_stride()) {
    const int64_t r = t % row, q = t / row;
    const int64_t j = q % count, o = q / count;
    const auto v = static_cast<int64_t>(idx[j]);
    y[t] = v >= 0 && v < n ? params[(o * n + v) * row + r] : E(0);
  }
}

template <typename E>
void gather_sized(const KernelContext& k, int64_t outer, int64_t n, int64_t count, int64_t row) {
  const int64_t total = outer * count * row;
  if (total == 0) return;
  const auto* params = static_cast<const E*>(k.in(0).raw_data());
  auto* y = static_cast<E*>(k.out(0).raw_data());
  const cudaStream_t stream = context(k).stream;
  if (k.in(1).dtype() == DType::kInt32) {
    gather_kernel<E, std::int32_t><<<blocks(total), kThreads, 0, stream>>>(
        params, k.in(1).data<std::int32_t>(), y, n, count, row, total);
  } else {
    gather_kernel<E, int64_t><<<blocks(total), kThreads, 0, stream>>>(
        params, k.in(1).data<int64_t>(), y, n, count, row, total);
  }
  check_launch();
}

void gather(const KernelContext& k) {
  const Tensor& params = k.in(0);
  const Shape& ps = params.shape();
  const auto axis =
      static_cast<std::size_t>(normalized_axis(k.attr("axis").as_int(), params.rank()));
  const int64_t outer = product(ps, 0, axis);
  const int64_t row = product(ps, axis + 1, ps.size());
  const int64_t count = k.in(1).numel();
  switch (elem_size(params)) {
    case 1: return gather_sized<std::uint8_t>(k, outer, ps[axis], count, row);
    case 2: return gather_sized<std::uint16_t>(k, outer, ps[axis], count, row);
    case 4: return gather_sized<std::uint32_t>(k, outer, ps[axis], count, row);
    case 8: return gather_sized<std::uint64_t>(k, outer, ps[axis], count, row);
    default: break;
  }
  throw InternalError("Gather: expected an element size of 1, 2, 4 or 8");
}

// dx (outer, n, inner) += dout (outer, count, inner) at the indices: thread (o, c) adds the
// slices into column c of its outer block in index order.
template <typename T, typename Idx>
__global__ void gather_grad_kernel(const T* dout, const Idx* idx, T* dx, int64_t outer,
                                   int64_t n, int64_t count, int64_t inner) {
  for (int64_t t = global_thread(); t < outer * inner; t += thread_stride()) {
    const int64_t o = t / inner, c = t % inner;
    for (int64_t j = 0; j < count; ++j) {
      const auto v = static_cast<int64_t>(idx[j]);
      if (v < 0 || v >= n) continue;
      T* d = dx + (o * n + v) * inner + c;
      *d = dm::add(*d, dout[(o * count + j) * inner + c]);
    }
  }
}

template <typename T>
void gather_grad(const KernelContext& k) {
  const Tensor& dout = k.in(0);
  Tensor& dx = k.out(0);
  const Shape& xs = dx.shape();
  const auto axis = static_cast<std::size_t>(normalized_axis(k.attr("axis").as_int(), dx.rank()));
  const int64_t outer = product(xs, 0, axis);
  const int64_t inner = product(xs, axis + 1, xs.size());
  const int64_t count = k.in(1).numel();
  const cudaStream_t stream = context(k).stream;
  if (dx.nbytes() == 0) return;
  LOOM_CUDA_CHECK(cudaMemsetAsync(dx.raw_data(), 0, dx.nbytes(), stream));
  if (outer * inner == 0 || count == 0) return;
  if (k.in(1).dtype() == DType::kInt32) {
    gather_grad_kernel<T, std::int32_t><<<blocks(outer * inner), kThreads, 0, stream>>>(
        dout.data<T>(), k.in(1).data<std::int32_t>(), dx.data<T>(), outer, xs[axis], count,
        inner);
  } else {
    gather_grad_kernel<T, int64_t><<<blocks(outer * inner), kThreads, 0, stream>>>(
        dout.data<T>(), k.in(1).data<int64_t>(), dx.data<T>(), outer, xs[axis], count, inner);
  }
  check_launch();
}

// y (outer, depth, inner) = on where idx[o, i] names the row, else off.
template <typename Idx>
__global__ void one_hot_kernel(const Idx* idx, float* y, int64_t depth, int64_t inner,
                               int64_t total, float on, float off) {
  for (int64_t t = global_thread(); t < total; t += thread_stride()) {
    const int64_t i = t % inner, q = t / inner;
    const int64_t d = q % depth, o = q / depth;
    y[t] = static_cast<int64_t>(idx[o * inner + i]) == d ? on : off;
  }
}

void one_hot(const KernelContext& k) {
  const Tensor& indices = k.in(0);
  Tensor& y = k.out(0);
  const int64_t total = y.numel();
  if (total == 0) return;
  const int64_t depth = k.attr("depth").as_int();
  const int64_t axis = k.attr("axis").as_int();
  const auto split = static_cast<std::size_t>(axis == -1 ? indices.rank() : axis);
  const int64_t inner = product(indices.shape(), split, indices.shape().size());
  const auto on = static_cast<float>(k.attr("on_value").as_double());
  const auto off = static_cast<float>(k.attr("off_value").as_double());
  const cudaStream_t stream = context(k).stream;
  if (indices.dtype() == DType::kInt32) {
    one_hot_kernel<std::int32_t><<<blocks(total), kThreads, 0, stream>>>(
        indices.data<std::int32_t>(), y.data<float>(), depth, inner, total, on, off);
  } else {
    one_hot_kernel<int64_t><<<blocks(total), kThreads, 0, stream>>>(
        indices.data<int64_t>(), y.data<float>(), depth, inner, total, on, off);
  }
  check_launch();
}

// ---- Registration -------------------------------------------------------------------------

template <typename... Ts>
struct Types {};
constexpr Types<float, double> kFloating;
constexpr Types<__half, __nv_bfloat16> kHalf;
constexpr Types<float, double, std::int32_t, std::int64_t> kNumeric;
constexpr Types<float, double, std::int32_t, std::int64_t, std::uint8_t, bool> kAll;

// An elementwise op: every output element written, runs in place (as the CPU declares it).
void add_elementwise(KernelRegistry& r, std::string_view op, DType dtype, Kernel kernel) {
  r.add(op, dtype, kernel).writes_every_output_element().elementwise();
}
template <typename Op, typename... Ts>
void add_binary(KernelRegistry& r, std::string_view op, Types<Ts...>) {
  (add_elementwise(r, op, dtype_of<Ts>(), &binary<Op, Ts>), ...);
}
template <typename Op, typename... Ts>
void add_compare(KernelRegistry& r, std::string_view op, Types<Ts...>) {
  (add_elementwise(r, op, DTypeOf<Ts>::value, &compare<Op, Ts>), ...);
}
template <typename Op, typename... Ts>
void add_unary(KernelRegistry& r, std::string_view op, Types<Ts...>) {
  (add_elementwise(r, op, dtype_of<Ts>(), &unary<Op, Ts>), ...);
}

// The Float16 / BFloat16 kernels of mixed precision (the header comment).
void add_half_kernels(KernelRegistry& r) {
  add_binary<AddOp>(r, "Add", kHalf);
  add_binary<SubOp>(r, "Sub", kHalf);
  add_binary<MulOp>(r, "Mul", kHalf);
  add_binary<MaxOp>(r, "Maximum", kHalf);
  add_binary<MinOp>(r, "Minimum", kHalf);
  add_unary<NegOp>(r, "Neg", kHalf);
  add_unary<SquareOp>(r, "Square", kHalf);
  add_unary<ReLUOp>(r, "ReLU", kHalf);
  add_unary<ReLU6Op>(r, "ReLU6", kHalf);
  add_elementwise(r, "ReluGrad", DType::kFloat16, &relu_grad<__half>);
  add_elementwise(r, "ReluGrad", DType::kBFloat16, &relu_grad<__nv_bfloat16>);
  r.add("BiasAdd", DType::kFloat16, &bias_add<__half>).writes_every_output_element();
  r.add("BiasAdd", DType::kBFloat16, &bias_add<__nv_bfloat16>).writes_every_output_element();
}

}  // namespace

void register_elementwise_kernels(KernelRegistry& r) {
  add_binary<AddOp>(r, "Add", kNumeric);
  add_binary<SubOp>(r, "Sub", kNumeric);
  add_binary<MulOp>(r, "Mul", kNumeric);
  add_binary<DivOp>(r, "RealDiv", kFloating);
  add_binary<PowOp>(r, "Pow", kFloating);
  add_binary<MaxOp>(r, "Maximum", kNumeric);
  add_binary<MinOp>(r, "Minimum", kNumeric);
  add_compare<EqualOp>(r, "Equal", kAll);
  add_compare<LessOp>(r, "Less", kNumeric);
  add_compare<GreaterOp>(r, "Greater", kNumeric);
  add_unary<NegOp>(r, "Neg", kNumeric);
  add_unary<SquareOp>(r, "Square", kNumeric);
  add_unary<AbsOp>(r, "Abs", kNumeric);
  add_unary<SignOp>(r, "Sign", kNumeric);
  add_unary<SqrtOp>(r, "Sqrt", kFloating);
  add_unary<RsqrtOp>(r, "Rsqrt", kFloating);
  add_unary<ExpOp>(r, "Exp", kFloating);
  add_unary<LogOp>(r, "Log", kFloating);
  add_unary<ReLUOp>(r, "ReLU", kNumeric);
  add_unary<ReLU6Op>(r, "ReLU6", kFloating);
  add_unary<SigmoidOp>(r, "Sigmoid", kFloating);
  add_unary<TanhOp>(r, "Tanh", kFloating);
  add_unary<GeLUOp>(r, "GeLU", kFloating);
  add_elementwise(r, "ReluGrad", DType::kFloat32, &relu_grad<float>);
  add_elementwise(r, "ReluGrad", DType::kFloat64, &relu_grad<double>);
  // Not elementwise as an op (b is not broadcast by NumPy's rules), as on the CPU.
  r.add("BiasAdd", DType::kFloat32, &bias_add<float>).writes_every_output_element();
  r.add("BiasAdd", DType::kFloat64, &bias_add<double>).writes_every_output_element();
  // Keyed by the value dtype (Select's kernel_dtype_from is input 1, x).
  for (DType d : {DType::kBool, DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64,
                  DType::kUInt8}) {
    r.add("Select", d, &select).writes_every_output_element().elementwise();
  }
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kUInt8,
                  DType::kBool}) {
    add_elementwise(r, "ZerosLike", d, &zeros_like);
  }
  add_elementwise(r, "OnesLike", DType::kFloat32, &ones_like<float>);
  add_elementwise(r, "OnesLike", DType::kFloat64, &ones_like<double>);
  add_elementwise(r, "OnesLike", DType::kInt32, &ones_like<std::int32_t>);
  add_elementwise(r, "OnesLike", DType::kInt64, &ones_like<std::int64_t>);
  add_elementwise(r, "OnesLike", DType::kUInt8, &ones_like<std::uint8_t>);
  add_elementwise(r, "OnesLike", DType::kBool, &ones_like<bool>);
  // As on the CPU, Fill declares nothing (its fresh outputs are zero-filled first) and Cast only
  // that it runs in place.
  r.add("Fill", DType::kFloat32, &fill<float>);
  r.add("Fill", DType::kFloat64, &fill<double>);
  r.add("Fill", DType::kInt32, &fill<std::int32_t>);
  r.add("Fill", DType::kInt64, &fill<std::int64_t>);
  r.add("Fill", DType::kUInt8, &fill<std::uint8_t>);
  r.add("Fill", DType::kBool, &fill<bool>);
  r.add("Cast", DType::kFloat32, &cast<float>).elementwise();
  r.add("Cast", DType::kFloat64, &cast<double>).elementwise();
  r.add("Cast", DType::kInt32, &cast<std::int32_t>).elementwise();
  r.add("Cast", DType::kInt64, &cast<std::int64_t>).elementwise();
  r.add("Cast", DType::kUInt8, &cast<std::uint8_t>).elementwise();
  r.add("Cast", DType::kBool, &cast<bool>).elementwise();
  r.add("Cast", DType::kFloat16, &cast_from_bits).elementwise();
  r.add("Cast", DType::kBFloat16, &cast_from_bits).elementwise();
  r.add("Dropout", DType::kFloat32, dropout<float>);
  r.add("Dropout", DType::kFloat64, dropout<double>);
  r.add("FusedElementwise", DType::kFloat32, fused_elementwise<float>)
      .with_prepare(prepare_fused_elementwise)
      .elementwise();
  r.add("FusedElementwise", DType::kFloat64, fused_elementwise<double>)
      .with_prepare(prepare_fused_elementwise)
      .elementwise();

  // Array ops: one kernel for every dtype, as on the CPU.
  for (DType d : kAllDTypes) {
    r.add("Reshape", d, copy_kernel);
    r.add("ExpandDims", d, copy_kernel);
    r.add("Squeeze", d, copy_kernel);
    r.add("Flatten", d, copy_kernel).writes_every_output_element();
    r.add("Transpose", d, transpose_kernel);
    r.add("Concat", d, concat_kernel);
    r.add("Split", d, split_kernel);
    r.add("Slice", d, slice_kernel);
    r.add("StridedSlice", d, strided_slice_kernel);
    r.add("StridedSliceGrad", d, strided_slice_grad_kernel);
    r.add("Tile", d, tile_kernel);
    r.add("BroadcastTo", d, broadcast_to_kernel);
    r.add("Gather", d, gather);
  }
  r.add("GatherGrad", DType::kFloat32, gather_grad<float>);
  r.add("GatherGrad", DType::kFloat64, gather_grad<double>);
  r.add("GatherGrad", DType::kInt32, gather_grad<std::int32_t>);
  r.add("GatherGrad", DType::kInt64, gather_grad<std::int64_t>);
  // Keyed by the output dtype (OneHot's kernel_dtype_from is -1); Int32 or Int64 indices.
  r.add("OneHot", DType::kFloat32, one_hot);
  if (half_kernels_enabled()) add_half_kernels(r);
}

}  // namespace loom::backend::cuda
