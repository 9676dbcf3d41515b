/// \file
/// Dumps of a compiled function's tensors in MindSpore's CPU/GPU dump layout (docs/design.md,
/// "debug/"), configured with MindSpore's own keys:
///
///   debug::DumpConfig c = debug::load_dump_config("data_dump.json");   // or dump_config_for_dir
///   auto dumper = std::make_shared<debug::Dumper>(c);
///   model.add_observer(dumper);                  // every compiled launch of training and eval
///   model.fit(epochs, train, test, {dumper.get()});   // the step numbers, the gradients
///
/// Per dumped run of a program: its launches' inputs and/or outputs (by `input_output`, filtered
/// by `dump_mode` / `kernels`), every graph parameter as Parameter.{name} (before the run), and for
/// a training step every gradient as Gradient.{name}; as .npy files (`saved_data` tensor / full)
/// and statistic.csv rows (statistic / full). The first dumped run of each program also writes its
/// IR text and its execution order. Writes are counted: past `max_bytes` the dumper stops writing
/// and says so through the note callback (the run goes on).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "nn/callback.h"
#include "runtime/observer.h"

namespace loom::debug {

struct DumpConfig {
  int op_debug_mode = 0;      ///< 0: every selected launch; 3: only launches with a NaN/Inf output
  int dump_mode = 0;          ///< 0: all; 1: the kernels list
  std::string path;           ///< the dump folder
  std::string net_name = "Net";
  std::string iteration = "all";  // "all" or "0|5-8|100-120"
  std::string saved_data = "tensor";  // tensor | statistic | full
  int input_output = 0;       ///< 0: inputs and outputs; 1: inputs; 2: outputs
  std::vector<std::string> kernels;  ///< full names, op names, op types, "name-regex(RE)"
  std::vector<std::string> statistic_category = {"max", "min", "l2norm"};
  bool e2e_enable = true;
  bool trans_flag = true;
  std::uint64_t max_bytes = std::uint64_t{1} << 30;  ///< loom's: --dump-max-bytes
  std::string source;         ///< where it came from, for messages ("data_dump.json", "--dump")

  /// True when `iteration` selects iteration i.
  bool selects_iteration(std::int64_t i) const;
  /// How many of iterations 0 .. n-1 it selects.
  std::int64_t count_iterations(std::int64_t n) const;
  /// MindSpore's JSON form ({"common_dump_settings": {...}, "e2e_dump_settings": {...}}).
  std::string to_json() const;
};

/// Parses MindSpore's dump configuration. ValueError naming `source` and the key for: invalid
/// JSON, a missing common_dump_settings or path, an unknown key, a value of the wrong type or out
/// of range (dump_mode 2 is refused: loom has no set_dump), an empty or malformed iteration, an
/// unknown statistic category, a bad regex in kernels.
DumpConfig parse_dump_config(const std::string& json_text, const std::string& source);
DumpConfig load_dump_config(const std::string& file);
/// `--dump DIR`: dump_mode 0, every iteration, saved_data full, net_name `net`.
DumpConfig dump_config_for_dir(const std::string& dir, const std::string& net);
/// Parses a byte count for --dump-max-bytes: "1000000", "500K", "64M", "2G" (binary units).
std::uint64_t parse_byte_count(const std::string& text, const std::string& what);

/// A dump file's name: {op_type}.{op_name}.0.0.{timestamp}.{io}.{slot}.DefaultFormat.npy.
std::string dump_file_name(const std::string& op_type, const std::string& op_name,
                           std::int64_t timestamp, const std::string& io, std::int64_t slot);
/// A timestamp for the next dump file: now in microseconds, above `last` (which it updates), so
/// that a folder's files sort in the order they were written.
std::int64_t next_dump_timestamp(std::int64_t& last);
/// Writes a tensor (copied to the host; BFloat16 as Float32, as MindSpore) as an .npy file in
/// `dir` (created); returns the path. ValueError naming the file when it cannot be written.
std::string write_dump_npy(const std::string& dir, const std::string& op_type,
                           const std::string& op_name, const std::string& io, std::int64_t slot,
                           const Tensor& t, std::int64_t& last_timestamp);

/// The dump name of a launch: its node's name when it has one (a loaded MindIR's nodes), else
/// "{OpType}-op{label}" ({label}: %label in the graph's IR text); "-{graph}" appended at
/// depth > 0.
std::string dump_op_name(const runtime::LaunchEvent& e);
/// Its full name: the Cell scope's path with the op name as last component.
std::string dump_full_name(const runtime::LaunchEvent& e, const std::string& op_name);

class Dumper : public runtime::Observer, public nn::Callback {
 public:
  /// `note`: where messages go (the size estimate, the max_bytes stop); default stderr.
  explicit Dumper(DumpConfig config, std::function<void(const std::string&)> note = {});
  ~Dumper() override;

  const DumpConfig& config() const { return config_; }
  int rank() const { return rank_; }
  void set_rank(int rank) { rank_ = rank; }
  /// The number of training steps the run will make, for the size estimate (0: unknown).
  void set_total_iterations(std::int64_t n) { total_iterations_ = n; }
  /// True when the configuration dumps gradients: the training step must return them
  /// (TrainOneStepCell::set_return_gradients before its first compilation; on_train_begin does it
  /// otherwise, at the cost of a second compilation).
  bool wants_gradients() const;

  /// Observer.
  void run_begin(const runtime::RunEvent& e) override;
  void run_end(const runtime::RunEvent& e) override;
  void before_launch(const runtime::LaunchEvent& e) override;
  void after_launch(const runtime::LaunchEvent& e) override;
  /// Inputs are written before their launch: no need for a plan without in-place reuse.
  /// Callback: training steps are iterations (global step - 1); gradients after each step.
  void on_train_begin(nn::RunContext& rc) override;
  void on_train_step_begin(nn::RunContext& rc) override;
  void on_train_step_end(nn::RunContext& rc) override;

  std::uint64_t bytes_written() const { return bytes_written_; }
  std::int64_t files_written() const { return files_written_; }
  bool stopped() const { return stopped_; }

  /// Writes one tensor as {op_type}.{op_name}.0.0.{ts}.{io}.{slot}.DefaultFormat.npy into the
  /// current iteration's folder and/or its statistic row (the config's saved_data). False once
  /// max_bytes stopped the dump. Used for launches, parameters and gradients, and by
  /// --check-numerics for the failing node.
  bool write(const std::string& op_type, const std::string& op_name, const std::string& io,
             std::int64_t slot, const Tensor& t);

 private:
  struct Program;  ///< per compiled graph: its id, runs, execution order
  bool selected(const runtime::LaunchEvent& e, const std::string& op_name,
                const std::string& full_name) const;
  /// dump_mode 1: a parameter or gradient named in kernels ("fc1.weight", "Gradient.fc1.weight",
  /// or a name-regex matching "Parameter.fc1.weight" / "Gradient.fc1.weight").
  bool selected_name(const std::string& kind, const std::string& name) const;
  std::string rank_dir() const;
  void flush_statistics();
  void note(const std::string& text) const;
  static std::string format_bytes(std::uint64_t bytes);

  DumpConfig config_;
  std::function<void(const std::string&)> note_;
  std::vector<std::regex> regexes_;    ///< the kernels' name-regex entries
  int rank_ = 0;
  std::int64_t total_iterations_ = 0;
  std::optional<std::int64_t> step_;   ///< the training step running (0-based), from the callback
  std::unordered_map<const ir::FuncGraph*, std::unique_ptr<Program>> programs_;
  Program* current_ = nullptr;         ///< the program running; null between runs
  Program* last_dumped_ = nullptr;     ///< the last run's program when it was dumped (gradients)
  bool dumping_ = false;               ///< the current run is selected
  bool metadata_written_ = false;
  std::int64_t current_iteration_ = 0;
  std::string iteration_dir_;          ///< the current (or last dumped) run's folder
  bool iteration_dir_made_ = false;
  std::int64_t last_timestamp_ = 0;
  std::vector<std::string> statistic_rows_;
  std::uint64_t bytes_written_ = 0, run_start_bytes_ = 0;
  std::int64_t files_written_ = 0, run_start_files_ = 0;
  bool stopped_ = false;
  bool estimated_ = false;
  std::vector<Tensor> pending_inputs_;  ///< op_debug_mode 3: inputs kept until the outputs are seen
};

}  // namespace loom::debug
