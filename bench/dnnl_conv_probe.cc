// oneDNN's convolutions at the ResNet-18 (small-image layout) shapes, batch 32: forward, input
// gradient and filter gradient, GFLOP/s per CPU-second (--wall: per wall-clock second, for
// several threads), with plain NCHW tensors, with the layouts oneDNN picks itself (blocked,
// nChw16c), and with those plus the reorders from and to NCHW that a kernel behind loom's
// interface pays (backends/cpu/conv_dnnl.cc does this); --winograd runs the blocked cases with
// the Winograd algorithm at stride 1. The probe that decided oneDNN's place behind loom's
// convolutions (bench/README.md). Built where libdnnl-dev is installed (scripts/setup.sh
// installs it):
//
//   OMP_NUM_THREADS=2 build/bin/loom_bench_dnnl_conv --wall [--winograd]   # compare with
//   LOOM_CONV=loom build/bin/loom_bench_ops --benchmark_filter='Conv2D.*/resnet18_l[1-4]$'
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <dnnl.hpp>

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

bool g_wall = false;  // --wall: wall-clock seconds (for several threads) instead of CPU seconds
bool g_winograd = false;  // --winograd: oneDNN's Winograd algorithm in the blocked runs

double cpu_seconds() {
  timespec t{};
  clock_gettime(g_wall ? CLOCK_MONOTONIC : CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Layer {
  const char* name;
  int in, out, size, stride;
};

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    g_wall = g_wall || std::string(argv[i]) == "--wall";
    g_winograd = g_winograd || std::string(argv[i]) == "--winograd";
  }
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const Layer layers[] = {{"layer1", 64, 64, 32, 1},     {"layer2", 128, 128, 16, 1},
                          {"layer3", 256, 256, 8, 1},    {"layer4", 512, 512, 4, 1},
                          {"layer2.0 s2", 64, 128, 32, 2}};
  const int n = 32;
  for (const Layer& l : layers) {
    const int osize = l.size / l.stride;
    const memory::dims src{n, l.in, l.size, l.size}, wei{l.out, l.in, 3, 3},
        dst{n, l.out, osize, osize}, strides{l.stride, l.stride}, pad{1, 1};
    const double flops = 2.0 * n * l.out * osize * osize * l.in * 9;
    for (bool blocked : {false, true}) {
      const auto f32 = memory::data_type::f32;
      const memory::desc sd(src, f32, blocked ? Tag::any : Tag::nchw);
      const memory::desc wd(wei, f32, blocked ? Tag::any : Tag::oihw);
      const memory::desc dd(dst, f32, blocked ? Tag::any : Tag::nchw);
      const auto algo = blocked && g_winograd && l.stride == 1
                            ? dnnl::algorithm::convolution_winograd
                            : dnnl::algorithm::convolution_direct;
      const dnnl::convolution_forward::primitive_desc fpd(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, sd, wd, dd,
                                          strides, pad, pad),
          eng);
      const dnnl::convolution_backward_data::primitive_desc dpd(
          dnnl::convolution_backward_data::desc(algo, sd, wd, dd, strides, pad, pad), eng, fpd);
      const dnnl::convolution_backward_weights::primitive_desc wpd(
          dnnl::convolution_backward_weights::desc(algo, sd, wd, dd, strides, pad, pad), eng, fpd);
      memory x(fpd.src_desc(), eng), w(fpd.weights_desc(), eng), y(fpd.dst_desc(), eng);
      memory dx(dpd.diff_src_desc(), eng), dy(dpd.diff_dst_desc(), eng), w2(dpd.weights_desc(), eng);
      memory x3(wpd.src_desc(), eng), dy3(wpd.diff_dst_desc(), eng), dw(wpd.diff_weights_desc(), eng);
      const dnnl::convolution_forward fwd(fpd);
      const dnnl::convolution_backward_data bwd_data(dpd);
      const dnnl::convolution_backward_weights bwd_weights(wpd);
      // Best of 5 rounds of 3 calls, after one warm-up call.
      auto gflops = [&](auto call) {
        call();
        s.wait();
        double best = 1e30;
        for (int r = 0; r < 5; ++r) {
          const double t0 = cpu_seconds();
          for (int i = 0; i < 3; ++i) call();
          s.wait();
          best = std::min(best, (cpu_seconds() - t0) / 3);
        }
        return flops / best * 1e-9;
      };
      const double f = gflops([&] {
        fwd.execute(s, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, y}});
      });
      const double d = gflops([&] {
        bwd_data.execute(s, {{DNNL_ARG_DIFF_SRC, dx}, {DNNL_ARG_WEIGHTS, w2}, {DNNL_ARG_DIFF_DST, dy}});
      });
      const double g = gflops([&] {
        bwd_weights.execute(s, {{DNNL_ARG_SRC, x3}, {DNNL_ARG_DIFF_DST, dy3}, {DNNL_ARG_DIFF_WEIGHTS, dw}});
      });
      // The same calls with loom's tensors in NCHW: reorders into and out of the blocked layout
      // are part of each call, as they would be behind loom's kernel interface.
      if (blocked) {
        const memory::desc pd(src, f32, Tag::nchw), pw(wei, f32, Tag::oihw), pdst(dst, f32, Tag::nchw);
        memory ux(pd, eng), uw(pw, eng), uy(pdst, eng), udx(pd, eng), udy(pdst, eng), udw(pw, eng);
        auto reorder = [&](memory& a, memory& b) { dnnl::reorder(a, b).execute(s, a, b); };
        const double rf = gflops([&] {
          reorder(ux, x); reorder(uw, w);
          fwd.execute(s, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, y}});
          reorder(y, uy);
        });
        const double rd = gflops([&] {
          reorder(udy, dy); reorder(uw, w2);
          bwd_data.execute(s, {{DNNL_ARG_DIFF_SRC, dx}, {DNNL_ARG_WEIGHTS, w2}, {DNNL_ARG_DIFF_DST, dy}});
          reorder(dx, udx);
        });
        const double rg = gflops([&] {
          reorder(ux, x3); reorder(udy, dy3);
          bwd_weights.execute(s, {{DNNL_ARG_SRC, x3}, {DNNL_ARG_DIFF_DST, dy3}, {DNNL_ARG_DIFF_WEIGHTS, dw}});
          reorder(dw, udw);
        });
        std::printf("%-12s %-7s forward %6.1f  input grad %6.1f  filter grad %6.1f GFLOP/s, NCHW in and out\n",
                    l.name, "reorder", rf, rd, rg);
      }
      std::printf("%-12s %-7s forward %6.1f  input grad %6.1f  filter grad %6.1f GFLOP/s per CPU-second  (%s)\n",
                  l.name, blocked ? "blocked" : "nchw", f, d, g, fpd.impl_info_str());
    }
  }
  return 0;
}
