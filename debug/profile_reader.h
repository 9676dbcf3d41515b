/// \file
/// Reading a profile folder written by `loom train --profile DIR` (debug/profiler.h writes it;
/// docs/design.md "debug/ — the profiler" has the files and their columns), for
/// `loom profile show` and for tests:
///
/// ```
/// debug::ProfileDir p = debug::open_profile("prof");
/// for (const debug::RankProfile& r : p.ranks) { ... r.info.model, r.steps, r.op_types ... }
/// debug::StepAverage avg = debug::average_steps(p.ranks[0]);   // the steady-state breakdown
/// for (const debug::SlowestRank& s : debug::slowest_ranks(p)) { ... s.step, s.slowest_rank ... }
/// ```
///
/// Per rank r the folder holds profile_info_{r}.json, cpu_op_type_info_{r}.csv,
/// cpu_op_detail_info_{r}.csv and step_trace_{r}.csv (all required), memory_plan_{r}.csv (required
/// when profile_info says "memory": true) and communication_{r}.csv (when "communication": true).
/// The trace, cpu_timeline_display_{r}.json, is for viewers and is not read. CSV columns are found
/// by header name (extra columns are ignored); fields may be quoted with "" escapes. The two op
/// tables follow MindSpore's CPU profiler (profiler/device/data_saver.h: times in ms, a proportion
/// as a fraction 0..1 of all ops' time) before loom's columns; step_trace and communication are in
/// µs. Every time in the structs below is µs (the op tables' ms are multiplied by 1000). Errors —
/// a missing folder, no profile_info file, a rank with some of its files missing, a missing
/// column, a field that is not a number, a fraction above 1, a profile_info that is not the
/// version-1 object, ranks that disagree — are ValueErrors naming the file (and line) and what is
/// wrong. Files of other names in the folder are not read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom::debug {

/// profile_info_{r}.json.
struct ProfileInfo {
  int version = 1;   ///< the format's version: 1, the only one loom writes
  int rank = 0;      ///< the rank profiled
  int ranks = 1;     ///< the number of ranks of the run
  std::string model; ///< ProfilerOptions::model
  int threads = 1;   ///< the thread pool's threads
  /// The chosen window (start_step, stop_step), 1-based, both ends included.
  ///@{
  std::int64_t start_step = 0, stop_step = 0;
  ///@}
  std::vector<std::int64_t> steps;             ///< the steps profiled (the rows of step_trace)
  double peak_gflops = 0;                      ///< the machine's fp32 FMA peak
  std::string cpu;                             ///< the CPU's name
  std::string device;                          ///< the device the steps ran on ("" for the CPU)
  bool memory = false;                         ///< `--profile-memory`: memory_plan_{r}.csv written
  bool communication = false;                  ///< `--profile-communication`: communication_{r}.csv
};

/// One row of cpu_op_type_info_{r}.csv: an op type over the profiled steps.
struct OpTypeRow {
  std::string op_type;                   ///< "Conv2D"
  std::int64_t occurrences = 0;          ///< type_occurrences
  std::int64_t execution_frequency = 0;  ///< execution_frequency(per-step): launches per step
  double total_time = 0;                 ///< µs (the file's total_compute_time, ms)
  double avg_time = 0;                   ///< µs per launch (the file's avg_time(ms))
  double op_fraction = 0;                ///< percent: a fraction 0..1 of all ops' time
  double proportion = 0;                 ///< step_percent: % of the profiled steps' time
  double flops = 0;              ///< as the profiler counts them; 0: a type without FLOPs
  double gflops_per_s = 0;       ///< NaN when the file leaves it empty
  double peak_percent = 0;       ///< NaN when empty
  double bytes = 0;              ///< read and written by its launches
  double gb_per_s = 0;           ///< NaN when empty
};

/// One row of cpu_op_detail_info_{r}.csv: one node.
struct OpDetailRow {
  std::string op_side;       ///< "Host"
  std::string op_type;       ///< "Conv2D"
  std::string op_name;       ///< "Conv2D-op3"
  std::string full_op_name;  ///< "Default/network-WithLossCell/.../Conv2D-op3"
  std::int64_t occurrences = 0;  ///< op_occurrences: the node's launches
  double total_time = 0;   ///< µs (the file's op_total_time(ms))
  double avg_time = 0;     ///< µs (the file's op_avg_time(ms))
  double op_fraction = 0;  ///< total_proportion: a fraction 0..1 of all ops' time
  std::string subgraph;    ///< "Default"
  std::int64_t pid = 0;    ///< the process id of the profiled process
  double proportion = 0;   ///< step_percent: % of the profiled steps' time
  std::string role;        ///< "forward", "backward", "optimizer", ...
  std::string forward;    ///< for a gradient node: the forward node it differentiates
  std::string cell;       ///< the Cell path
  std::string file;       ///< the source file
  int line = 0;           ///< 0 when unknown
  /// As in OpTypeRow, for the node: flops, gflops_per_s, peak_percent, bytes, gb_per_s (the three
  /// rates NaN when the file leaves them empty).
  ///@{
  double flops = 0, gflops_per_s = 0, peak_percent = 0, bytes = 0, gb_per_s = 0;
  ///@}
};

/// One row of step_trace_{r}.csv: one profiled step, times in µs.
struct StepRow {
  std::int64_t step = 0;               ///< the global step (by hand: the window's number)
  double start = 0;                    ///< from the profiler's start
  std::optional<double> interval;      ///< to the next profiled step's begin; none for the last
  double total = 0;                    ///< the step's begin to its end, data wait excluded
  /// data_wait: the wait for the step's data before it; compile: the compile time inside it;
  /// forward, backward, optimizer: the time of the step's launches by role (an If or While
  /// launch counted whole, AllReduce launches apart).
  ///@{
  double data_wait = 0, compile = 0, forward = 0, backward = 0, optimizer = 0;
  ///@}
  /// communication: the all-reduce buckets begun in the step (on whichever thread ran them);
  /// communication_wait: the AllReduce launches, the step waiting for them; host_overhead: total
  /// minus compile minus the launches' time (slightly negative when the clock's rounding says so).
  ///@{
  double communication = 0, communication_wait = 0, host_overhead = 0;
  ///@}
  /// rss_mib: the process RSS at the step's end, MiB (none without `--profile-memory`);
  /// plan_peak_mib: the arena of the step's plan, MiB (none when the plan is not known, e.g. by
  /// hand).
  ///@{
  std::optional<double> rss_mib, plan_peak_mib;
  ///@}
};

/// One row of memory_plan_{r}.csv: a buffer of the training step's plan.
struct MemoryPlanRow {
  /// buffer: the buffer's id; owner: the name of the launch that first writes it ("Conv2D-op3")
  /// and op_type its op type (both empty when that is before the first launch).
  ///@{
  std::string buffer, owner, op_type;
  ///@}
  /// Its size and its offset in the plan's arena, in bytes.
  ///@{
  std::int64_t bytes = 0, offset = 0;
  ///@}
  /// The first and last launch it is live at (launch indices; -1: before the first launch).
  ///@{
  std::int64_t first_launch = 0, last_launch = 0;
  ///@}
};

/// One row of communication_{r}.csv: one all-reduce bucket.
struct CommunicationRow {
  /// The step it began in (0: none), the all-reduce id and the bytes of this rank's tensors.
  ///@{
  std::int64_t step = 0, id = 0, bytes = 0;
  ///@}
  /// Its start (from the profiler's start), its duration, and the part of it during which the
  /// main thread ran kernels; µs.
  ///@{
  double start = 0, duration = 0, overlap = 0;
  ///@}
};

/// One rank's files.
struct RankProfile {
  ProfileInfo info;                     ///< profile_info_{r}.json
  std::vector<OpTypeRow> op_types;      ///< as in the file (sorted by total time)
  std::vector<OpDetailRow> op_details;  ///< as in the file (sorted by total time)
  std::vector<StepRow> steps;           ///< by step
  std::optional<std::vector<MemoryPlanRow>> memory_plan;        ///< when the file is there
  std::optional<std::vector<CommunicationRow>> communication;   ///< when the file is there
};

/// A profile folder, read by open_profile().
struct ProfileDir {
  std::string path;                ///< as given
  std::vector<RankProfile> ranks;  ///< ranks[i].info.rank == i, every rank of profile_info's "ranks"

  /// Rank `r`'s profile; ValueError naming the ranks there are.
  const RankProfile& rank(int r) const;
};

/// Reads every rank of a profile folder. ValueError as above.
ProfileDir open_profile(const std::string& path);

/// The phases of one step or their mean, µs.
struct StepPhases {
  /// As the StepRow fields of the same names.
  ///@{
  double total = 0, data_wait = 0, compile = 0, forward = 0, backward = 0, optimizer = 0;
  double communication = 0, communication_wait = 0, host_overhead = 0;
  ///@}
};

/// The steady-state average of a rank's steps: the steps after the first one with compile > 0
/// (the compiling step and those before it are left out); every step when none compiled; when
/// the compiling step is the last one, that step alone (then `steady` is false).
struct StepAverage {
  std::vector<std::int64_t> steps;  ///< the steps averaged
  StepPhases mean;                  ///< the mean of each phase over those steps
  std::optional<std::int64_t> compiled_step;  ///< the first step with compile > 0
  bool steady = true;                         ///< false when a compiling step is averaged
};
/// The steady-state average of `rank`'s steps (above).
StepAverage average_steps(const RankProfile& rank);

/// A step's work: its interval (its begin to the next profiled step's begin) minus its
/// communication wait — the time the rank spent on its own part of the step. The last profiled
/// step has no interval; its data wait plus its total stand in for it.
double step_work(const StepRow& step);

/// For each step every rank profiled (in step order): the rank with the most work — the one the
/// others wait for in the all-reduce — and the one with the least.
struct SlowestRank {
  std::int64_t step = 0;    ///< the global step
  int slowest_rank = 0;     ///< the rank with the most work (step_work())
  double slowest_work = 0;  ///< µs
  int fastest_rank = 0;     ///< the rank with the least work
  double fastest_work = 0;  ///< µs
  /// slowest_work - fastest_work, µs.
  double spread() const { return slowest_work - fastest_work; }
};
/// One SlowestRank per step every rank profiled, in the order of rank 0's steps; ties go to the
/// lower rank. Empty when the profile has no rank.
std::vector<SlowestRank> slowest_ranks(const ProfileDir& profile);

}  // namespace loom::debug
