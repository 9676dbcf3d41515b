// oneDNN's convolutions behind loom's kernel interface (conv_dnnl.h).
//
// Per call: look up (or create: oneDNN JIT-compiles, ≈ 1 ms) the primitive for the shape and
// thread count, wrap loom's NCHW / OIHW buffers as oneDNN memory, reorder each input whose
// layout differs from the one the primitive chose (format_tag::any: nChw16c and blocked
// filters at ResNet's shapes) into a scratch buffer, run, and reorder the output back when it
// was computed in a blocked layout. Primitives and scratch buffers are thread-local: a kernel
// thread never waits on another, and the scratch buffers only ever grow to the largest layer.
#include "backends/cpu/conv_dnnl.h"

#if LOOM_HAVE_DNNL

#include <omp.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>

#include <dnnl.hpp>

namespace loom::backend::cpu {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Key = std::array<std::int64_t, 16>;

// A 64-byte aligned buffer that grows on demand and keeps its largest size.
class Scratch {
 public:
  ~Scratch() { std::free(data_); }
  void* get(std::size_t bytes) {
    if (bytes > capacity_) {
      std::free(data_);
      capacity_ = (bytes + 63) / 64 * 64;
      data_ = std::aligned_alloc(64, capacity_);
      if (data_ == nullptr) {
        capacity_ = 0;
        throw std::bad_alloc();
      }
    }
    return data_;
  }

 private:
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
};

// The three computations of a convolution: y from (x, w), dx from (dy, w), dw from (dy, x).
enum Kind { kForward = 0, kData = 1, kWeights = 2 };

// A primitive with the layouts it reads its two inputs in and writes its output in.
struct Prepared {
  dnnl::primitive primitive;
  memory::desc in0, in1, out;
};

// One convolution shape: the forward primitive descriptor (made first; oneDNN's hint for the
// backward ones) and the three primitives, each made on first use. `failed` marks a shape
// oneDNN did not take (loom's kernels run it from then on).
struct Conv {
  memory::desc src, weights, dst;  // loom's layouts: nchw, oihw, nchw
  memory::dims strides, dilates, pad_l, pad_r;
  dnnl::algorithm algo = dnnl::algorithm::convolution_direct;
  std::optional<dnnl::convolution_forward::primitive_desc> fwd_pd;
  std::optional<Prepared> prepared[3];
  bool failed = false;
};

struct ThreadState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, std::unique_ptr<Conv>> convs;
  Scratch scratch[3];
};

ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

Key key_of(const ConvShape& s, int threads) {
  return {s.n, s.c, s.h, s.w, s.o, s.oh, s.ow, s.kh, s.kw, s.sh, s.sw, s.dil_h, s.dil_w,
          s.pad_top, s.pad_left, threads};
}

// The padding after the input that makes oneDNN's output extent come out as s.oh × s.ow (none
// when the window's last position ends inside the input).
std::int64_t pad_after(std::int64_t in, std::int64_t out, std::int64_t stride, std::int64_t kernel,
                       std::int64_t dilation, std::int64_t pad_before) {
  const std::int64_t extent = (kernel - 1) * dilation + 1;
  const std::int64_t r = (out - 1) * stride + extent - in - pad_before;
  return r > 0 ? r : 0;
}

// Winograd F(4×4, 3×3) for 3×3 stride-1 undilated convolutions (2.25× fewer multiplications;
// its transforms round differently: bench/README.md has the errors), unless LOOM_WINOGRAD=0,
// where the output has at least kWinogradMinPositions positions (batch × height × width): with
// fewer, its 6×6 tiles and transforms cost more than the multiplications they save (ResNet-50 at
// batch 1: 7×7 maps 3.5-3.9 ms against 1.4 ms direct, 14×14 maps 1.11 against 1.03 ms; batch 8's
// 7×7 maps, 392 positions, and ResNet-18's at batch 32, 512, gain; bench/README.md).
constexpr std::int64_t kWinogradMinPositions = 256;
bool use_winograd(const ConvShape& s) {
  if (s.kh != 3 || s.kw != 3 || s.sh != 1 || s.sw != 1 || s.dil_h != 1 || s.dil_w != 1) {
    return false;
  }
  if (s.n * s.oh * s.ow < kWinogradMinPositions) return false;
  const char* env = std::getenv("LOOM_WINOGRAD");
  return env == nullptr || std::string(env) != "0";
}

// `d`'s dimensions with the layout left to the primitive.
memory::desc any(const memory::desc& d) {
  return memory::desc(d.dims(), memory::data_type::f32, Tag::any);
}

Conv& conv_of(const ConvShape& s, int threads) {
  ThreadState& st = state();
  std::unique_ptr<Conv>& slot = st.convs[key_of(s, threads)];
  if (slot) return *slot;
  slot = std::make_unique<Conv>();
  Conv& c = *slot;
  const auto f32 = memory::data_type::f32;
  c.src = memory::desc({s.n, s.c, s.h, s.w}, f32, Tag::nchw);
  c.weights = memory::desc({s.o, s.c, s.kh, s.kw}, f32, Tag::oihw);
  c.dst = memory::desc({s.n, s.o, s.oh, s.ow}, f32, Tag::nchw);
  c.strides = {s.sh, s.sw};
  c.dilates = {s.dil_h - 1, s.dil_w - 1};  // oneDNN counts the gaps
  c.pad_l = {s.pad_top, s.pad_left};
  c.pad_r = {pad_after(s.h, s.oh, s.sh, s.kh, s.dil_h, s.pad_top),
             pad_after(s.w, s.ow, s.sw, s.kw, s.dil_w, s.pad_left)};
  try {
    if (s.pad_top < 0 || s.pad_left < 0) throw dnnl::error(dnnl_unimplemented, "cropped input");
    auto forward = [&] {
      c.fwd_pd.emplace(dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, c.algo,
                                                       any(c.src), any(c.weights), any(c.dst),
                                                       c.strides, c.dilates, c.pad_l, c.pad_r),
                       st.engine);
    };
    if (use_winograd(s)) {
      c.algo = dnnl::algorithm::convolution_winograd;
      try {
        forward();
      } catch (const dnnl::error&) {  // not for this shape: the direct algorithm
        c.algo = dnnl::algorithm::convolution_direct;
      }
    }
    if (!c.fwd_pd) forward();
  } catch (const dnnl::error&) {
    c.failed = true;
  }
  return c;
}

// `user` as oneDNN memory in the layout `want`: user itself, or a reorder of it into scratch.
memory input_as(const memory::desc& want, memory user, Scratch& scratch, ThreadState& st) {
  if (want == user.get_desc()) return user;
  memory m(want, st.engine, scratch.get(want.get_size()));
  dnnl::reorder(user, m).execute(st.stream, user, m);
  return m;
}

// The primitive's output buffer: user itself when the layouts agree, else scratch.
memory output_as(const memory::desc& have, const memory& user, Scratch& scratch, ThreadState& st) {
  if (have == user.get_desc()) return user;
  return memory(have, st.engine, scratch.get(have.get_size()));
}

void finish_output(memory& computed, memory& user, ThreadState& st) {
  if (computed.get_data_handle() != user.get_data_handle()) {
    dnnl::reorder(computed, user).execute(st.stream, computed, user);
  }
  st.stream.wait();
}

// The primitive of `kind` for c, made on first use. Every layout is left to oneDNN: the
// forward's blocked filter is not the one its backward-data kernels read (given it, oneDNN
// falls back to its reference loops).
const Prepared& prepared(Conv& c, Kind kind, ThreadState& st) {
  std::optional<Prepared>& p = c.prepared[kind];
  if (p) return *p;
  if (kind == kForward) {
    const auto& pd = *c.fwd_pd;
    p.emplace(Prepared{dnnl::convolution_forward(pd), pd.src_desc(), pd.weights_desc(),
                       pd.dst_desc()});
  } else if (kind == kData) {
    const dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(c.algo, any(c.src), any(c.weights), any(c.dst),
                                              c.strides, c.dilates, c.pad_l, c.pad_r),
        st.engine, *c.fwd_pd);
    p.emplace(Prepared{dnnl::convolution_backward_data(pd), pd.diff_dst_desc(),
                       pd.weights_desc(), pd.diff_src_desc()});
  } else {
    const dnnl::convolution_backward_weights::primitive_desc pd(
        dnnl::convolution_backward_weights::desc(c.algo, any(c.src), any(c.weights), any(c.dst),
                                                 c.strides, c.dilates, c.pad_l, c.pad_r),
        st.engine, *c.fwd_pd);
    p.emplace(Prepared{dnnl::convolution_backward_weights(pd), pd.diff_dst_desc(),
                       pd.src_desc(), pd.diff_weights_desc()});
  }
  return *p;
}

// One of a call's tensors: its layout in loom (a member of Conv), oneDNN's argument id and data.
struct Operand {
  memory::desc Conv::*layout;
  int arg;
  const float* data;
};

// Runs the primitive of `kind` on loom's buffers: in0 and in1 reordered into the primitive's
// layouts where they differ, the output computed in place or reordered back.
bool run(const ConvShape& s, int threads, Kind kind, Operand in0, Operand in1, Operand out) {
  omp_set_num_threads(threads);
  Conv& c = conv_of(s, threads);
  if (c.failed) return false;
  ThreadState& st = state();
  try {
    const Prepared& p = prepared(c, kind, st);
    auto user = [&](const Operand& o) {
      return memory(c.*o.layout, st.engine, const_cast<float*>(o.data));
    };
    memory u_out = user(out);
    memory a = input_as(p.in0, user(in0), st.scratch[0], st);
    memory b = input_as(p.in1, user(in1), st.scratch[1], st);
    memory result = output_as(p.out, u_out, st.scratch[2], st);
    p.primitive.execute(st.stream, {{in0.arg, a}, {in1.arg, b}, {out.arg, result}});
    finish_output(result, u_out, st);
  } catch (const dnnl::error&) {
    // The caller's kernel then writes every element of the output.
    c.failed = true;
    return false;
  }
  return true;
}

}  // namespace

bool dnnl_conv_available() { return true; }

std::string dnnl_version_string() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

bool dnnl_winograd_available() {
  // ResNet-18's layer1 at batch 32 (a shape every Winograd kernel of oneDNN 2.6 takes).
  const ConvShape s{.n = 32, .c = 64, .h = 32, .w = 32, .o = 64, .oh = 32, .ow = 32, .kh = 3,
                    .kw = 3, .sh = 1, .sw = 1, .dil_h = 1, .dil_w = 1, .pad_top = 1,
                    .pad_left = 1};
  const auto f32 = memory::data_type::f32;
  try {
    const dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_winograd,
            memory::desc({s.n, s.c, s.h, s.w}, f32, Tag::any),
            memory::desc({s.o, s.c, s.kh, s.kw}, f32, Tag::any),
            memory::desc({s.n, s.o, s.oh, s.ow}, f32, Tag::any), {1, 1}, {0, 0}, {1, 1}, {1, 1}),
        state().engine);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

bool conv2d_dnnl(const ConvShape& s, const float* x, const float* w, float* y, int threads) {
  return run(s, threads, kForward, {&Conv::src, DNNL_ARG_SRC, x},
             {&Conv::weights, DNNL_ARG_WEIGHTS, w}, {&Conv::dst, DNNL_ARG_DST, y});
}

bool conv2d_backprop_input_dnnl(const ConvShape& s, const float* dy, const float* w, float* dx,
                                int threads) {
  return run(s, threads, kData, {&Conv::dst, DNNL_ARG_DIFF_DST, dy},
             {&Conv::weights, DNNL_ARG_WEIGHTS, w}, {&Conv::src, DNNL_ARG_DIFF_SRC, dx});
}

bool conv2d_backprop_filter_dnnl(const ConvShape& s, const float* dy, const float* x, float* dw,
                                 int threads) {
  return run(s, threads, kWeights, {&Conv::dst, DNNL_ARG_DIFF_DST, dy},
             {&Conv::src, DNNL_ARG_SRC, x}, {&Conv::weights, DNNL_ARG_DIFF_WEIGHTS, dw});
}

}  // namespace loom::backend::cpu

#else  // built without oneDNN: conv_kernels.cc runs loom's own kernels

namespace loom::backend::cpu {

bool dnnl_conv_available() { return false; }
std::string dnnl_version_string() { return ""; }
bool dnnl_winograd_available() { return false; }
bool conv2d_dnnl(const ConvShape&, const float*, const float*, float*, int) { return false; }
bool conv2d_backprop_input_dnnl(const ConvShape&, const float*, const float*, float*, int) {
  return false;
}
bool conv2d_backprop_filter_dnnl(const ConvShape&, const float*, const float*, float*, int) {
  return false;
}

}  // namespace loom::backend::cpu

#endif
