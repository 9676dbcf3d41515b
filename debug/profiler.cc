// The profiler (debug/profiler.h): recording while the chosen steps run, then analyse() writing
// the tables, the step breakdown and the Trace Event Format timeline.
#include "debug/profiler.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "backends/cpu/peak.h"
#include "backends/thread_pool.h"
#include "core/ir/error.h"
#include "debug/csv.h"
#include "debug/dump.h"
#include "nn/train.h"
#include "ops/op.h"
#include "parallel/parallel.h"
#include "runtime/compiled_function.h"
#include "runtime/executable.h"

namespace loom::debug {

namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double rss_mib() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) /
         (1024.0 * 1024.0);
}


// A JSON string literal.
std::string js(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string num(double v, int precision = 3) {
  if (!std::isfinite(v)) return "0";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

std::string types_text(std::span<const Tensor> ts) {
  std::string s;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (i) s += ";";
    s += std::string(dtype_name(ts[i].dtype())) + shape_to_string(ts[i].shape());
  }
  return s;
}

bool is_communication(const std::string& op) { return op.rfind("AllReduce", 0) == 0; }

// The Cell path of a launch: its scope without the last component (the op).
std::vector<std::string> scope_path(const std::string& scope) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start < scope.size()) {
    const std::size_t slash = std::min(scope.find('/', start), scope.size());
    parts.push_back(scope.substr(start, slash - start));
    start = slash + 1;
  }
  if (!parts.empty()) parts.pop_back();
  return parts;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.flush();
  if (!f) throw ValueError("profiler: cannot write " + path);
}

}  // namespace

// ---- Trace sinks (called from the pool's threads and the communication thread) --------------

class Profiler::PoolSink : public backend::ThreadPool::TraceSink {
 public:
  explicit PoolSink(Profiler& p) : p_(p) {}
  void span(int thread, std::int64_t begin_ns, std::int64_t end_ns) override {
    std::lock_guard<std::mutex> lock(p_.spans_mu_);
    p_.pool_spans_.push_back({thread, begin_ns, end_ns});
  }

 private:
  Profiler& p_;
};

class Profiler::CommSink : public parallel::Communicator::TraceSink {
 public:
  explicit CommSink(Profiler& p) : p_(p) {}
  void reduction(std::int64_t id, std::size_t bytes, std::int64_t begin_ns, std::int64_t end_ns,
                 bool on_communication_thread) override {
    std::lock_guard<std::mutex> lock(p_.spans_mu_);
    p_.reductions_.push_back({0, begin_ns, end_ns, id, bytes, on_communication_thread});
  }

 private:
  Profiler& p_;
};

// ---- Recording ------------------------------------------------------------------------------

Profiler::Profiler(ProfilerOptions options) : options_(std::move(options)) {
  if (options_.start_step < 1 || options_.stop_step < options_.start_step) {
    throw ValueError("profiler: expected 1 <= start_step <= stop_step, got " +
                     std::to_string(options_.start_step) + " and " +
                     std::to_string(options_.stop_step));
  }
  threads_ = backend::ThreadPool::global().num_threads();
  // The ceiling for the FLOP/s columns, measured once before anything is recorded (~60 ms).
  if (options_.device != Device::kCPU) {
    backend::Backend& b = backend::get_backend(options_.device);
    peak_gflops_ = b.peak_fp32_gflops();
    device_ = b.describe();
  } else {
    peak_gflops_ = backend::cpu::measure_fp32_peak(1, 0.03).per_core_gflops * threads_;
  }
  origin_ns_ = now_ns();
  pool_sink_ = std::make_unique<PoolSink>(*this);
  comm_sink_ = std::make_unique<CommSink>(*this);
}

Profiler::~Profiler() { detach_traces(); }

void Profiler::attach_traces() {
  backend::ThreadPool::global().set_trace(pool_sink_.get());
  if (options_.profile_communication && parallel::initialized()) {
    parallel::world().set_trace(comm_sink_.get());
  }
}

void Profiler::detach_traces() {
  backend::ThreadPool::global().set_trace(nullptr);
  if (parallel::initialized()) parallel::world().set_trace(nullptr);
}

void Profiler::begin_step(std::int64_t number, double compile_seconds_now) {
  attach_traces();
  Step s;
  s.number = number;
  s.begin_ns = now_ns();
  steps_.push_back(s);
  compile_at_begin_ = compile_seconds_now;
  open_.clear();
  recording_ = true;
}

void Profiler::end_step(double data_wait_s, double compile_seconds_now,
                        const runtime::Executable* plan) {
  Step& s = steps_.back();
  s.end_ns = now_ns();
  s.data_wait_s = data_wait_s;
  s.compile_s = std::max(0.0, compile_seconds_now - compile_at_begin_);
  s.plan = plan;
  if (options_.profile_memory) s.rss_mib = rss_mib();
  recording_ = false;
  detach_traces();
}

void Profiler::start() {
  if (recording_) throw ValueError("profiler: start() while already recording");
  manual_ = true;
  begin_step(static_cast<std::int64_t>(steps_.size()) + 1, 0);
}

void Profiler::stop() {
  if (!recording_) throw ValueError("profiler: stop() without start()");
  end_step(0, 0, nullptr);
}

void Profiler::on_train_step_begin(nn::RunContext& rc) {
  if (manual_ || rc.cur_step_num < options_.start_step || rc.cur_step_num > options_.stop_step) {
    return;
  }
  const double compile = rc.train_network ? rc.train_network->compiled_function().compile_seconds()
                                          : 0.0;
  begin_step(rc.cur_step_num, compile);
}

void Profiler::on_train_step_end(nn::RunContext& rc) {
  if (manual_ || !recording_) return;
  const double compile = rc.train_network ? rc.train_network->compiled_function().compile_seconds()
                                          : 0.0;
  end_step(rc.data_wait_seconds, compile,
           rc.train_network ? rc.train_network->last_executable() : nullptr);
}

std::int32_t Profiler::intern(const runtime::LaunchEvent& e) {
  auto it = node_of_.find(&e.debug);
  if (it != node_of_.end()) return it->second;
  Node n;
  n.op = std::string(e.op);
  n.op_name = dump_op_name(e);
  n.full_name = dump_full_name(e, n.op_name);
  n.scope = e.debug.scope;
  n.forward = e.debug.forward;
  n.file = e.debug.file;
  n.line = e.debug.line;
  n.role = e.debug.role;
  n.depth = e.depth;
  n.graph = std::string(e.graph);
  std::vector<Shape> in, out;
  for (const Tensor& t : e.inputs) {
    in.push_back(t.shape());
    n.bytes += static_cast<std::int64_t>(t.nbytes());
  }
  for (const Tensor& t : e.outputs) {
    out.push_back(t.shape());
    n.bytes += static_cast<std::int64_t>(t.nbytes());
  }
  if (e.prim) {
    if (const ops::OpDef* def = ops::Registry::global().find(e.op); def && def->flops) {
      n.flops = def->flops(*e.prim, in, out);
    }
  }
  n.shapes = types_text(e.inputs) + " -> " + types_text(e.outputs);
  const auto id = static_cast<std::int32_t>(nodes_.size());
  nodes_.push_back(std::move(n));
  node_of_.emplace(&e.debug, id);
  return id;
}

void Profiler::before_launch(const runtime::LaunchEvent& e) {
  if (recording_) open_.push_back(now_ns());
}

void Profiler::after_launch(const runtime::LaunchEvent& e) {
  if (!recording_ || open_.empty()) return;
  const std::int64_t end = now_ns();
  const std::int64_t begin = open_.back();
  open_.pop_back();
  launches_.push_back({intern(e), static_cast<std::int32_t>(steps_.size() - 1), begin, end,
                       e.depth == 0 ? static_cast<std::int64_t>(e.index) : -1});
}

// ---- Analysis -------------------------------------------------------------------------------

std::vector<std::string> Profiler::analyse() {
  if (recording_) end_step(0, compile_at_begin_, nullptr);  // an unfinished window
  if (steps_.empty()) {
    throw ValueError("profiler: nothing was recorded (steps " +
                     std::to_string(options_.start_step) + " to " +
                     std::to_string(options_.stop_step) + " did not run)");
  }
  const std::string dir = options_.output_path;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw ValueError("profiler: cannot create the folder " + dir + ": " + ec.message());
  const std::string r = std::to_string(options_.rank);
  std::vector<std::string> written;
  auto us = [&](std::int64_t ns) { return static_cast<double>(ns - origin_ns_) / 1000.0; };
  auto dur_us = [](std::int64_t a, std::int64_t b) { return static_cast<double>(b - a) / 1000.0; };

  std::vector<Span> pool, reductions;
  {
    std::lock_guard<std::mutex> lock(spans_mu_);
    pool = pool_spans_;
    reductions = reductions_;
  }

  // Per step: the role sums and the communication.
  double steps_total_us = 0;
  struct Breakdown {
    double forward = 0, backward = 0, optimizer = 0, comm_wait = 0, kernels = 0;
    double communication = 0;
  };
  std::vector<Breakdown> bd(steps_.size());
  for (const Launch& l : launches_) {
    const Node& n = nodes_[static_cast<std::size_t>(l.node)];
    if (n.depth != 0) continue;  // nested launches are inside their If / While launch
    Breakdown& b = bd[static_cast<std::size_t>(l.step)];
    const double d = dur_us(l.begin_ns, l.end_ns);
    b.kernels += d;
    if (is_communication(n.op)) {
      b.comm_wait += d;
    } else if (n.role == ir::Role::kBackward) {
      b.backward += d;
    } else if (n.role == ir::Role::kOptimizer) {
      b.optimizer += d;
    } else {
      b.forward += d;
    }
  }
  for (const Span& s : reductions) {
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      if (s.begin_ns >= steps_[i].begin_ns && s.begin_ns <= steps_[i].end_ns) {
        bd[i].communication += dur_us(s.begin_ns, s.end_ns);
      }
    }
  }
  for (const Step& s : steps_) steps_total_us += dur_us(s.begin_ns, s.end_ns);

  // step_trace_{r}.csv
  {
    std::string t = "step,start,interval,total,data_wait,compile,forward,backward,optimizer,"
                    "communication,communication_wait,host_overhead,rss_mib,plan_peak_mib\n";
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      const Step& s = steps_[i];
      const Breakdown& b = bd[i];
      const double total = dur_us(s.begin_ns, s.end_ns);
      const double compile = s.compile_s * 1e6;
      t += std::to_string(s.number) + "," + num(us(s.begin_ns)) + "," +
           (i + 1 == steps_.size() ? std::string()
                                   : num(dur_us(s.begin_ns, steps_[i + 1].begin_ns))) +
           "," +
           num(total) + "," + num(s.data_wait_s * 1e6) + "," + num(compile) + "," +
           num(b.forward) + "," + num(b.backward) + "," + num(b.optimizer) + "," +
           num(b.communication) + "," + num(b.comm_wait) + "," +
           num(std::max(0.0, total - compile - b.kernels)) + "," +
           (options_.profile_memory ? num(s.rss_mib, 2) : std::string()) + "," +
           (s.plan ? num(static_cast<double>(s.plan->peak_bytes()) / (1024.0 * 1024.0), 2)
                   : std::string()) +
           "\n";
    }
    written.push_back(dir + "/step_trace_" + r + ".csv");
    write_file(written.back(), t);
  }

  // Per node and per op type.
  struct Acc {
    std::int64_t count = 0;
    double total_us = 0, flops = 0;
    std::int64_t bytes = 0;
  };
  std::vector<Acc> per_node(nodes_.size());
  for (const Launch& l : launches_) {
    Acc& a = per_node[static_cast<std::size_t>(l.node)];
    const Node& n = nodes_[static_cast<std::size_t>(l.node)];
    ++a.count;
    a.total_us += dur_us(l.begin_ns, l.end_ns);
    a.flops += n.flops;
    a.bytes += n.bytes;
  }
  const double peak = peak_gflops_;
  auto rates = [&](const Acc& a) {
    const double s = a.total_us * 1e-6;
    const double gflops = a.flops > 0 && s > 0 ? a.flops / s * 1e-9 : 0;
    const double gbs = s > 0 ? static_cast<double>(a.bytes) / s * 1e-9 : 0;
    return num(a.flops, 0) + "," + num(gflops, 2) + "," +
           num(peak > 0 ? 100.0 * gflops / peak : 0, 2) + "," + std::to_string(a.bytes) + "," +
           num(gbs, 3);
  };
  double ops_total_us = 0;
  for (const Acc& a : per_node) ops_total_us += a.total_us;
  // MindSpore's proportion: a fraction of all ops' time; loom's step_percent: % of the steps.
  auto fraction = [&](double total_us) {
    return num(ops_total_us > 0 ? total_us / ops_total_us : 0, 6);
  };
  auto step_percent = [&](double total_us) {
    return num(steps_total_us > 0 ? 100.0 * total_us / steps_total_us : 0, 2);
  };
  auto ms = [](double us_value) { return num(us_value / 1000.0, 6); };
  const std::string process_id = std::to_string(::getpid());
  {
    std::vector<std::size_t> order(nodes_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return per_node[a].total_us > per_node[b].total_us;
    });
    // MindSpore's CPU op-detail columns (profiler/device/data_saver.h: ms, a fraction of all
    // ops' time), then loom's.
    std::string t = "op_side,op_type,op_name,full_op_name,op_occurrences,op_total_time(ms),"
                    "op_avg_time(ms),total_proportion,subgraph,pid,step_percent,role,forward,"
                    "cell,file,line,flops,gflops_per_s,peak_percent,bytes,gb_per_s\n";
    for (std::size_t i : order) {
      const Node& n = nodes_[i];
      const Acc& a = per_node[i];
      if (a.count == 0) continue;
      const std::vector<std::string> path = scope_path(n.scope);
      std::string cell;
      for (const std::string& p : path) cell += (cell.empty() ? "" : "/") + p;
      t += "Host," + csv_field(n.op) + "," + csv_field(n.op_name) + "," + csv_field(n.full_name) +
           "," + std::to_string(a.count) + "," + ms(a.total_us) + "," +
           ms(a.total_us / static_cast<double>(a.count)) + "," + fraction(a.total_us) +
           ",Default," + process_id + "," + step_percent(a.total_us) + "," +
           std::string(ir::role_name(n.role)) + "," + csv_field(n.forward) + "," +
           csv_field(cell) + "," + csv_field(n.file) + "," + std::to_string(n.line) + "," +
           rates(a) + "\n";
    }
    written.push_back(dir + "/cpu_op_detail_info_" + r + ".csv");
    write_file(written.back(), t);

    std::map<std::string, Acc> per_type;
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      Acc& a = per_type[nodes_[i].op];
      a.count += per_node[i].count;
      a.total_us += per_node[i].total_us;
      a.flops += per_node[i].flops;
      a.bytes += per_node[i].bytes;
    }
    std::vector<std::pair<std::string, Acc>> types(per_type.begin(), per_type.end());
    std::stable_sort(types.begin(), types.end(), [](const auto& a, const auto& b) {
      return a.second.total_us > b.second.total_us;
    });
    // MindSpore's CPU op-type columns, then loom's.
    std::string u = "op_type,type_occurrences,execution_frequency(per-step),total_compute_time,"
                    "avg_time(ms),percent,step_percent,flops,gflops_per_s,peak_percent,bytes,"
                    "gb_per_s\n";
    const auto nsteps = static_cast<std::int64_t>(steps_.size());
    for (const auto& [type, a] : types) {
      if (a.count == 0) continue;
      u += csv_field(type) + "," + std::to_string(a.count) + "," +
           std::to_string(a.count / nsteps) + "," + ms(a.total_us) + "," +
           ms(a.total_us / static_cast<double>(a.count)) + "," + fraction(a.total_us) + "," +
           step_percent(a.total_us) + "," + rates(a) + "\n";
    }
    written.push_back(dir + "/cpu_op_type_info_" + r + ".csv");
    write_file(written.back(), u);
  }

  // Memory: the plan of the (last) step plan seen.
  const runtime::Executable* plan = nullptr;
  for (const Step& s : steps_) plan = s.plan ? s.plan : plan;
  std::vector<double> live_after;  // per plan launch index: live planned bytes after it
  if (options_.profile_memory && plan) {
    const auto& lives = plan->lives();
    const auto& planned = plan->planned_buffers();
    const auto& offsets = plan->plan().offsets;
    const auto& pl = plan->launches();
    live_after.assign(pl.size(), 0.0);
    std::string t = "buffer,owner,op_type,bytes,offset,first_launch,last_launch\n";
    for (std::size_t k = 0; k < lives.size(); ++k) {
      const auto& life = lives[k];
      std::string owner, type;
      if (life.first >= 0 && static_cast<std::size_t>(life.first) < pl.size()) {
        const auto& l = pl[static_cast<std::size_t>(life.first)];
        type = l.prim->name();
        owner = l.name.empty() ? type + "-op" + l.label : l.name;
      }
      t += std::to_string(planned[k]) + "," + csv_field(owner) + "," + csv_field(type) + "," +
           std::to_string(life.bytes) + "," + std::to_string(offsets[k]) + "," +
           std::to_string(life.first) + "," + std::to_string(life.last) + "\n";
      for (std::int64_t i = std::max<std::int64_t>(0, life.first);
           i <= life.last && i < static_cast<std::int64_t>(pl.size()); ++i) {
        live_after[static_cast<std::size_t>(i)] += static_cast<double>(life.bytes);
      }
    }
    written.push_back(dir + "/memory_plan_" + r + ".csv");
    write_file(written.back(), t);
  }

  // Communication: each bucket with the part of it during which the main thread ran kernels.
  if (options_.profile_communication) {
    std::string t = "step,id,bytes,start,duration,overlap\n";
    for (const Span& s : reductions) {
      std::int64_t step = 0;
      for (const Step& st : steps_) {
        if (s.begin_ns >= st.begin_ns && s.begin_ns <= st.end_ns) step = st.number;
      }
      double overlap = 0;
      for (const Launch& l : launches_) {
        const Node& n = nodes_[static_cast<std::size_t>(l.node)];
        if (n.depth != 0 || is_communication(n.op)) continue;
        const std::int64_t a = std::max(l.begin_ns, s.begin_ns);
        const std::int64_t b = std::min(l.end_ns, s.end_ns);
        if (b > a) overlap += dur_us(a, b);
      }
      t += std::to_string(step) + "," + std::to_string(s.id) + "," + std::to_string(s.bytes) +
           "," + num(us(s.begin_ns)) + "," + num(dur_us(s.begin_ns, s.end_ns)) + "," +
           num(overlap) + "\n";
    }
    written.push_back(dir + "/communication_" + r + ".csv");
    write_file(written.back(), t);
  }

  // The timeline: Trace Event Format, object form.
  {
    const std::string pid = std::to_string(options_.rank);
    std::string t = "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"producer\": \"loom\", "
                    "\"model\": " + js(options_.model) + ", \"rank\": " + pid + "},\n"
                    "\"traceEvents\": [\n";
    bool first = true;
    auto add = [&](const std::string& event) {
      if (!first) t += ",\n";
      first = false;
      t += event;
    };
    auto meta = [&](const std::string& name, const std::string& tid, const std::string& args) {
      add("{\"name\": \"" + name + "\", \"ph\": \"M\", \"pid\": " + pid + ", \"tid\": " + tid +
          ", \"args\": " + args + "}");
    };
    // Slices are written per track in start order, an enclosing slice before the slices it
    // holds (longer first at equal starts), so that viewers stack them outside in.
    // `level` breaks ties between slices with the same start and end: the step (0), its scopes
    // (1 + nesting level), then what they hold.
    struct Slice {
      int tid;
      std::int64_t begin, end;
      int level;
      std::string text;
    };
    std::vector<Slice> slices;
    int level = 0;  // the level of the next slice (set by the caller of slice)
    auto slice = [&](const std::string& name, const std::string& cat, int tid, std::int64_t b,
                     std::int64_t e, const std::string& args) {
      e = std::max(b, e);
      slices.push_back({tid, b, e, level,
                        "{\"name\": " + js(name) + ", \"cat\": \"" + cat +
                            "\", \"ph\": \"X\", \"pid\": " + pid + ", \"tid\": " +
                            std::to_string(tid) + ", \"ts\": " + num(us(b)) +
                            ", \"dur\": " + num(dur_us(b, e)) +
                            (args.empty() ? std::string() : ", \"args\": " + args) + "}"});
    };
    meta("process_name", "0", "{\"name\": \"rank " + pid + "\"}");
    meta("process_sort_index", "0", "{\"sort_index\": " + pid + "}");
    meta("thread_name", "1", "{\"name\": \"main\"}");
    meta("thread_sort_index", "1", "{\"sort_index\": 1}");
    for (int w = 1; w < threads_; ++w) {
      meta("thread_name", std::to_string(1 + w), "{\"name\": \"pool worker " +
                                                      std::to_string(w) + "\"}");
      meta("thread_sort_index", std::to_string(1 + w), "{\"sort_index\": " +
                                                          std::to_string(1 + w) + "}");
    }
    if (options_.profile_communication) {
      meta("thread_name", "1000", "{\"name\": \"communication\"}");
      meta("thread_sort_index", "1000", "{\"sort_index\": 1000}");
    }
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      const Step& s = steps_[i];
      slice("step " + std::to_string(s.number), "step", 1, s.begin_ns, s.end_ns,
            "{\"data_wait_us\": " + num(s.data_wait_s * 1e6) + ", \"compile_us\": " +
                num(s.compile_s * 1e6) + "}");
      if (s.data_wait_s > 0) {  // before the step, after the previous one's end
        const auto wait_ns = static_cast<std::int64_t>(s.data_wait_s * 1e9);
        const std::int64_t floor = i > 0 ? steps_[i - 1].end_ns : origin_ns_;
        slice("data wait", "data", 1, std::max(floor, s.begin_ns - wait_ns), s.begin_ns, "");
      }
      // The compilation happens at the step's start, before its first launch.
      std::int64_t first_launch = s.end_ns;
      for (const Launch& l : launches_) {
        if (l.step == static_cast<std::int32_t>(i)) first_launch = std::min(first_launch, l.begin_ns);
      }
      if (s.compile_s > 0 && first_launch > s.begin_ns) {
        slice("compile", "compile", 1, s.begin_ns, first_launch, "");
      }
      // Cell scopes as nested slices over the step's top-level launches.
      std::vector<std::pair<std::string, std::int64_t>> open;  // (component, begin)
      std::int64_t last_end = s.begin_ns;
      auto close_to = [&](std::size_t keep, std::int64_t at) {
        while (open.size() > keep) {
          level = 1 + static_cast<int>(open.size());
          slice(open.back().first, "scope", 1, open.back().second, at, "");
          open.pop_back();
        }
        level = 0;
      };
      for (const Launch& l : launches_) {
        if (l.step != static_cast<std::int32_t>(i)) continue;
        const Node& n = nodes_[static_cast<std::size_t>(l.node)];
        if (n.depth != 0) continue;
        const std::vector<std::string> path = scope_path(n.scope);
        std::size_t common = 0;
        while (common < open.size() && common < path.size() && open[common].first == path[common]) {
          ++common;
        }
        close_to(common, last_end);
        for (std::size_t k = common; k < path.size(); ++k) open.emplace_back(path[k], l.begin_ns);
        last_end = l.end_ns;
      }
      close_to(0, last_end);
    }
    level = 1000;  // kernels inside the innermost scope; nested launches by their depth
    for (const Launch& l : launches_) {
      const Node& n = nodes_[static_cast<std::size_t>(l.node)];
      level = 1000 + n.depth;
      slice(n.op_name, "kernel", 1, l.begin_ns, l.end_ns,
            "{\"op\": " + js(n.op) + ", \"full_name\": " + js(n.full_name) + ", \"role\": \"" +
                std::string(ir::role_name(n.role)) + "\"" +
                (n.forward.empty() ? std::string() : ", \"forward\": " + js(n.forward)) +
                (n.file.empty() ? std::string()
                                : ", \"source\": " + js(n.file + ":" + std::to_string(n.line))) +
                ", \"shapes\": " + js(n.shapes) + "}");
    }
    level = 2000;  // a caller's parallel_for share inside its kernel
    for (const Span& s : pool) {
      // The caller's share (thread 0) lies inside its kernel's slice on the main track.
      slice("parallel_for", "pool", s.thread == 0 ? 1 : 1 + s.thread, s.begin_ns, s.end_ns, "");
    }
    for (const Span& s : reductions) {
      slice("all-reduce #" + std::to_string(s.id), "communication",
            s.communication_thread ? 1000 : 1, s.begin_ns, s.end_ns,
            "{\"bytes\": " + std::to_string(s.bytes) + "}");
    }
    std::stable_sort(slices.begin(), slices.end(), [](const Slice& a, const Slice& b) {
      if (a.tid != b.tid) return a.tid < b.tid;
      if (a.begin != b.begin) return a.begin < b.begin;
      if (a.end != b.end) return a.end > b.end;
      return a.level < b.level;
    });
    for (const Slice& s : slices) add(s.text);
    if (options_.profile_memory) {
      for (const Launch& l : launches_) {
        if (l.plan_index < 0 || static_cast<std::size_t>(l.plan_index) >= live_after.size()) continue;
        add("{\"name\": \"memory\", \"ph\": \"C\", \"pid\": " + pid + ", \"tid\": 1, \"ts\": " +
            num(us(l.end_ns)) + ", \"args\": {\"plan_live_bytes\": " +
            num(live_after[static_cast<std::size_t>(l.plan_index)], 0) + "}}");
      }
      for (const Step& s : steps_) {
        add("{\"name\": \"rss\", \"ph\": \"C\", \"pid\": " + pid + ", \"tid\": 1, \"ts\": " +
            num(us(s.end_ns)) + ", \"args\": {\"rss_mib\": " + num(s.rss_mib, 2) + "}}");
      }
    }
    t += "\n]}\n";
    written.push_back(dir + "/cpu_timeline_display_" + r + ".json");
    write_file(written.back(), t);
  }

  // profile_info_{r}.json
  {
    nlohmann::ordered_json j;
    j["version"] = 1;
    j["rank"] = options_.rank;
    j["ranks"] = options_.ranks;
    j["model"] = options_.model;
    j["threads"] = threads_;
    j["start_step"] = options_.start_step;
    j["stop_step"] = options_.stop_step;
    std::vector<std::int64_t> numbers;
    for (const Step& s : steps_) numbers.push_back(s.number);
    j["steps"] = numbers;
    j["peak_gflops"] = std::round(peak_gflops_ * 10) / 10;
    std::string cpu;
    if (std::ifstream f("/proc/cpuinfo"); f) {
      for (std::string line; std::getline(f, line);) {
        if (line.rfind("model name", 0) == 0) {
          cpu = line.substr(line.find(':') + 2);
          break;
        }
      }
    }
    j["cpu"] = cpu;
    if (!device_.empty()) j["device"] = device_;
    j["memory"] = options_.profile_memory;
    j["communication"] = options_.profile_communication;
    written.push_back(dir + "/profile_info_" + r + ".json");
    write_file(written.back(), j.dump(2) + "\n");
  }
  return written;
}

}  // namespace loom::debug
