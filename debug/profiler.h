/// \file
/// The profiler: where a training step's time and memory go — MindSpore's Profiler with its knobs
/// (mindformers' profile, profile_start_step, profile_stop_step, profile_memory,
/// profile_communication), as an observer of the compiled step and a callback of the training
/// loop. docs/design.md ("the profiler") has the files it writes; docs/profiling.md is a
/// walk-through.
///
/// ```
/// auto prof = std::make_shared<debug::Profiler>(debug::ProfilerOptions{
///     .output_path = "prof", .start_step = 2, .stop_step = 5, .profile_memory = true});
/// model.add_observer(prof);
/// model.train(epochs, ds, {prof.get()});   // records steps 2..5 (global, 1-based)
/// prof->analyse();                          // writes prof/*_0.csv, the timeline, ...
/// ```
///
/// Or by hand around any compiled call: `prof->start(); cell(x); prof->stop(); prof->analyse()`
/// (each start/stop window is one "step").
///
/// Recorded while a chosen step runs (nothing outside, and nothing at all without a profiler):
/// every kernel launch (its node interned once: op, dump name, full name, Cell scope, role, the
/// forward node, file:line, FLOPs from OpDef::flops and the bytes it reads and writes) with its
/// start and duration on the launching thread; each pool worker's share of every parallel_for
/// (backend::ThreadPool::set_trace); the data wait before the step and the compile time inside
/// it; with profile_communication every all-reduce bucket (parallel::Communicator::set_trace);
/// with profile_memory the step plan's buffers and the process RSS.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "nn/callback.h"
#include "runtime/observer.h"

namespace loom::runtime {
class Executable;
}  // namespace loom::runtime

namespace loom::debug {

/// What a Profiler records and where it writes.
struct ProfilerOptions {
  std::string output_path = "profile";  ///< the folder analyse() writes into
  std::int64_t start_step = 1;  ///< the first global step recorded (1-based)
  std::int64_t stop_step = 10;  ///< the last one (included)
  /// Also record the step plan's buffers (memory_plan_{rank}.csv) and the process RSS.
  bool profile_memory = false;
  /// Also record every all-reduce bucket (when parallel is initialized).
  bool profile_communication = false;
  /// This process's rank (the files' _{rank} suffix) and the number of ranks (profile_info).
  ///@{
  int rank = 0, ranks = 1;
  ///@}
  std::string model;            ///< written into profile_info
  /// Where the profiled steps run: on a device its peak (Backend::peak_fp32_gflops) and name go
  /// into the tables and profile_info instead of the CPU's.
  Device device = Device::kCPU;
};

/// MindSpore's Profiler (above): an observer of the compiled step and a callback of the training
/// loop, or started and stopped by hand.
class Profiler : public runtime::Observer, public nn::Callback {
 public:
  /// ValueError when start_step < 1 or stop_step < start_step. Measures the peak FLOP/s of the
  /// CPU (or asks the device's backend for it) once, before anything is recorded.
  explicit Profiler(ProfilerOptions options);
  ~Profiler() override;
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  /// The options.
  const ProfilerOptions& options() const { return options_; }

  /// By hand: records every launch until stop() as one more step (the callback records no steps
  /// once start() was called). ValueError while recording.
  void start();
  /// Ends the step being recorded; ValueError when none is.
  void stop();
  /// True while a step is being recorded.
  bool recording() const { return recording_; }

  /// Writes the files into options().output_path (created); returns their paths. A step still
  /// being recorded is ended first. ValueError naming the file when one cannot be written, or
  /// when nothing was recorded.
  std::vector<std::string> analyse();

  /// runtime::Observer: while a step is recorded, each launch's start and end (launches nested
  /// in an If / While included).
  ///@{
  void before_launch(const runtime::LaunchEvent& e) override;
  void after_launch(const runtime::LaunchEvent& e) override;
  ///@}
  /// nn::Callback: the steps in [start_step, stop_step] are recorded, with the data wait before
  /// each and the compile time inside it.
  ///@{
  void on_train_step_begin(nn::RunContext& rc) override;
  void on_train_step_end(nn::RunContext& rc) override;
  ///@}

  /// The steps recorded so far (by-hand windows included).
  std::int64_t steps_recorded() const { return static_cast<std::int64_t>(steps_.size()); }
  /// The launches recorded so far.
  std::int64_t launches_recorded() const { return static_cast<std::int64_t>(launches_.size()); }

  /// One launched node, interned at its first launch.
  struct Node {
    /// The node's op ("Conv2D"), dump name (dump_op_name()), full name (dump_full_name()), Cell
    /// scope, forward node's scope (a gradient node), source file, and the graph holding it.
    ///@{
    std::string op, op_name, full_name, scope, forward, file, graph;
    ///@}
    int line = 0;                ///< the source line
    ir::Role role = ir::Role::kForward;  ///< forward, backward or optimizer
    int depth = 0;               ///< 0 for the step's own launches, +1 inside each If / While
    double flops = 0;            ///< per launch (OpDef::flops), 0 when the op has none
    std::int64_t bytes = 0;      ///< read + written per launch
    std::string shapes;          ///< "Float32(32, 1, 32, 32);Float32(6, 1, 5, 5) -> Float32(...)"
  };
  /// One recorded launch.
  struct Launch {
    std::int32_t node;           ///< index into the interned nodes
    std::int32_t step;           ///< index into the recorded steps
    /// Its start and end (std::chrono::steady_clock, ns).
    ///@{
    std::int64_t begin_ns, end_ns;
    ///@}
    std::int64_t plan_index;     ///< its index in the step plan's launch order (depth 0), else -1
  };
  /// One recorded step.
  struct Step {
    std::int64_t number = 0;     ///< the global step (by hand: the window's number)
    /// Its start and end (std::chrono::steady_clock, ns).
    ///@{
    std::int64_t begin_ns = 0, end_ns = 0;
    ///@}
    /// The wait for the step's data before it and the compile time inside it, in seconds
    /// (0 by hand).
    ///@{
    double data_wait_s = 0, compile_s = 0;
    ///@}
    double rss_mib = 0;          ///< profile_memory: the process RSS at the step's end, MiB
    const runtime::Executable* plan = nullptr;  ///< the step's compiled plan, when known
  };
  /// A thread's share of a parallel_for (backend::ThreadPool::set_trace), or a reduction.
  struct Span {
    int thread;                  ///< 0: the calling thread, from 1: a pool worker (reductions: 0)
    /// Its start and end (std::chrono::steady_clock, ns).
    ///@{
    std::int64_t begin_ns, end_ns;
    ///@}
    std::int64_t id = 0;         ///< reductions: the all-reduce id
    std::size_t bytes = 0;       ///< reductions: the bytes of this rank's tensors
    bool communication_thread = true;  ///< reductions: run on the communication thread
  };

 private:
  class PoolSink;
  class CommSink;
  void begin_step(std::int64_t number, double compile_seconds_now);
  void end_step(double data_wait_s, double compile_seconds_now, const runtime::Executable* plan);
  void attach_traces();
  void detach_traces();
  std::int32_t intern(const runtime::LaunchEvent& e);

  ProfilerOptions options_;
  double peak_gflops_ = 0;
  std::string device_;  ///< the device the steps ran on (empty: the CPU)
  int threads_ = 1;
  std::int64_t origin_ns_ = 0;
  bool recording_ = false;
  bool manual_ = false;
  double compile_at_begin_ = 0;
  std::vector<Step> steps_;
  std::vector<Node> nodes_;
  std::unordered_map<const ir::DebugInfo*, std::int32_t> node_of_;
  std::vector<Launch> launches_;
  std::vector<std::int64_t> open_;  ///< launch begin times of the launches running (nesting)
  std::unique_ptr<PoolSink> pool_sink_;
  std::unique_ptr<CommSink> comm_sink_;
  std::mutex spans_mu_;
  std::vector<Span> pool_spans_, reductions_;
};

}  // namespace loom::debug
