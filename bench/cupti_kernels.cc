// The kernels of a process's CUDA-graph replays, each kernel's time on the device: a CUPTI
// injection library (the CUDA driver loads it into any CUDA program named by
// CUDA_INJECTION64_PATH), for machines without Nsight Systems. scripts/gpu_check.sh's
// kernels_lenet step compiles it there, against that machine's CUPTI, and runs loom's and
// PyTorch's LeNet-5 step under it:
//
//   g++ -O2 -shared -fPIC -I$CUDA/include -I$CUPTI/include bench/cupti_kernels.cc
//       -DLOOM_CUPTI_KERNEL_RECORD=CUpti_ActivityKernel9 -L$CUPTI/lib -lcupti -o libck.so
//   CUDA_INJECTION64_PATH=$PWD/libck.so LOOM_CUPTI_TOP=30 PROGRAM ...
//
// At the program's exit it prints, to stderr: the number of replays of the graph it saw most
// often (kernels outside CUDA graphs, a warm-up or cuDNN's algorithm search among them, are not
// counted), its nodes, the median replay's span (first kernel's start to last kernel's end) and
// the kernels' busy time within it (the rest: gaps between kernels), then each kernel by its
// total time per replay. LOOM_CUPTI_KERNEL_RECORD names the kernel record of the machine's
// CUPTI (the highest CUpti_ActivityKernelN its cupti_activity.h declares); the fields read here
// (start, end, name, graphNodeId, graphId) sit at the same offsets in every version since 7.
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#ifndef LOOM_CUPTI_KERNEL_RECORD
#define LOOM_CUPTI_KERNEL_RECORD CUpti_ActivityKernel9
#endif

namespace {

struct Record {
  std::uint64_t start, end, node;
  std::uint32_t graph;
  std::string name;
};

std::mutex mu;
std::vector<Record> records;
std::size_t dropped = 0;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  std::fprintf(stderr, "cupti_kernels: %s failed: %s\n", what, text ? text : "?");
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max) {
  *size = 8u << 20;
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(8, *size));
  *max = 0;
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t stream, std::uint8_t* buffer,
                               std::size_t, std::size_t valid) {
  CUpti_Activity* r = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL) {
      continue;
    }
    const auto* k = reinterpret_cast<const LOOM_CUPTI_KERNEL_RECORD*>(r);
    if (k->graphId == 0) continue;  // not a graph replay
    records.push_back({k->start, k->end, k->graphNodeId, k->graphId, k->name ? k->name : "?"});
  }
  std::size_t d = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, stream, &d) == CUPTI_SUCCESS) dropped += d;
  std::free(buffer);
}

std::string short_name(const std::string& mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : mangled;
  std::free(d);
  // Template arguments and parameter lists say little in a table: keep the function's name.
  std::string out;
  int depth = 0;
  for (char c : s) {
    if (c == '<' || c == '(') ++depth;
    if (depth == 0) out += c;
    if ((c == '>' || c == ')') && depth > 0) --depth;
  }
  if (out.empty()) out = s;
  return out.size() > 88 ? out.substr(0, 85) + "..." : out;
}

void report() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(mu);
  if (records.empty()) {
    std::fprintf(stderr, "cupti_kernels: no kernel ran inside a CUDA graph\n");
    return;
  }
  // The graph replayed most often.
  std::map<std::uint32_t, std::size_t> per_graph;
  for (const Record& r : records) ++per_graph[r.graph];
  const std::uint32_t graph =
      std::max_element(per_graph.begin(), per_graph.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; })->first;
  std::vector<Record> g;
  for (const Record& r : records) {
    if (r.graph == graph) g.push_back(r);
  }
  std::sort(g.begin(), g.end(), [](const Record& a, const Record& b) { return a.start < b.start; });
  std::map<std::uint64_t, std::size_t> nodes;
  for (const Record& r : g) ++nodes[r.node];
  const std::size_t per_replay = nodes.size();
  const std::size_t replays = g.size() / per_replay;
  // Each replay: its span and its kernels' busy time (overlapping kernels counted once).
  std::vector<double> spans, busy;
  for (std::size_t i = 0; i + per_replay <= g.size(); i += per_replay) {
    std::uint64_t first = g[i].start, last = 0, covered = 0, open_end = 0;
    for (std::size_t j = i; j < i + per_replay; ++j) {
      last = std::max(last, g[j].end);
      const std::uint64_t s = std::max(g[j].start, open_end);
      if (g[j].end > s) covered += g[j].end - s;
      open_end = std::max(open_end, g[j].end);
    }
    spans.push_back(static_cast<double>(last - first) / 1e3);
    busy.push_back(static_cast<double>(covered) / 1e3);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  const double span = median(spans), kernels = median(busy);
  std::fprintf(stderr,
               "cupti_kernels: graph %u, %zu replays of %zu kernels (%zu records dropped); "
               "median replay %.1f us: kernels busy %.1f us (%.0f%%), gaps %.1f us\n",
               graph, replays, per_replay, dropped, span, kernels,
               span > 0 ? 100.0 * kernels / span : 0.0, span - kernels);
  struct Sum {
    std::size_t calls = 0;
    double total_us = 0;
  };
  std::map<std::string, Sum> by_name;
  for (const Record& r : g) {
    Sum& s = by_name[short_name(r.name)];
    ++s.calls;
    s.total_us += static_cast<double>(r.end - r.start) / 1e3;
  }
  std::vector<std::pair<std::string, Sum>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.total_us > b.second.total_us; });
  const char* top_env = std::getenv("LOOM_CUPTI_TOP");
  const std::size_t top = top_env ? std::strtoul(top_env, nullptr, 10) : 30;
  std::fprintf(stderr, "%10s %6s %9s  %s\n", "us/replay", "calls", "us/call", "kernel");
  for (std::size_t i = 0; i < rows.size() && i < top; ++i) {
    const double n = static_cast<double>(replays ? replays : 1);
    std::fprintf(stderr, "%10.2f %6.1f %9.2f  %s\n", rows[i].second.total_us / n,
                 static_cast<double>(rows[i].second.calls) / n,
                 rows[i].second.total_us / static_cast<double>(rows[i].second.calls),
                 rows[i].first.c_str());
  }
}

}  // namespace

extern "C" int InitializeInjection() {
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
        "cuptiActivityRegisterCallbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enabling kernel records");
  std::atexit(report);
  return 1;
}
