/// \file
/// Dumps of a compiled function's tensors in MindSpore's CPU/GPU dump layout (docs/design.md,
/// "debug/"), configured with MindSpore's own keys:
///
/// ```
/// debug::DumpConfig c = debug::load_dump_config("data_dump.json");   // or dump_config_for_dir
/// auto dumper = std::make_shared<debug::Dumper>(c);
/// model.add_observer(dumper);                  // every compiled launch of training and eval
/// model.fit(epochs, train, test, {dumper.get()});   // the step numbers, the gradients
/// ```
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

/// MindSpore's dump configuration (data_dump.json's keys), with loom's size limit.
struct DumpConfig {
  int op_debug_mode = 0;      ///< 0: every selected launch; 3: only launches with a NaN/Inf output
  int dump_mode = 0;          ///< 0: all; 1: the kernels list
  std::string path;           ///< the dump folder
  std::string net_name = "Net";  ///< the `{net_name}` folder under `rank_{r}`
  std::string iteration = "all";  ///< the iterations dumped: "all" or "0|5-8|100-120"
  std::string saved_data = "tensor";  ///< "tensor" (.npy), "statistic" (statistic.csv) or "full"
  int input_output = 0;       ///< 0: inputs and outputs; 1: inputs; 2: outputs
  std::vector<std::string> kernels;  ///< full names, op names, op types, "name-regex(RE)"
  /// statistic.csv's columns after the fixed ones, in this order; each one of "max", "min",
  /// "avg", "count", "negative zero count", "positive zero count", "nan count", "negative inf
  /// count", "positive inf count", "zero count", "l2norm", "md5".
  std::vector<std::string> statistic_category = {"max", "min", "l2norm"};
  bool e2e_enable = true;  ///< e2e_dump_settings.enable: false dumps nothing
  bool trans_flag = true;  ///< e2e_dump_settings.trans_flag: kept for to_json(), no effect in loom
  /// loom's (`--dump-max-bytes`): the .npy bytes at most written; the dump stops before passing it.
  std::uint64_t max_bytes = std::uint64_t{1} << 30;
  std::string source;         ///< where it came from, for messages ("data_dump.json", `"--dump"`)

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
/// Reads `file` and parses it as parse_dump_config does (`file` as the source); ValueError when it
/// cannot be opened.
DumpConfig load_dump_config(const std::string& file);
/// `--dump DIR`: path `dir`, dump_mode 0, every iteration, saved_data full, net_name `net` ("Net"
/// when empty).
DumpConfig dump_config_for_dir(const std::string& dir, const std::string& net);
/// Parses a byte count for `--dump-max-bytes`: "1000000", "500K", "64M", "2G" (binary units; "KiB",
/// "MiB", "GiB" too). ValueError naming `what` for anything else, 0, or more than 2^50 bytes.
std::uint64_t parse_byte_count(const std::string& text, const std::string& what);

/// The name of a dump file, with task and stream 0 and format DefaultFormat. That is
/// {op_type}.{op_name}.0.0.{timestamp}.{io}.{slot}.DefaultFormat.npy.
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
/// "{OpType}-op{label}" ({label}: `%label` in the graph's IR text); "-{graph}" (the graph's name,
/// other characters than letters, digits and _ made _) appended at depth > 0.
std::string dump_op_name(const runtime::LaunchEvent& e);
/// Its full name: the Cell scope's path with the op name as last component.
std::string dump_full_name(const runtime::LaunchEvent& e, const std::string& op_name);

/// Writes a dump by `config`: an observer of the compiled functions it is added to (launches,
/// parameters, IR text, execution order) and a training callback (the iteration of a training
/// step, its gradients). A run is dumped when its iteration is selected; the iteration is the
/// global step - 1 during a training step begun through the callback, otherwise the count of
/// earlier runs of the same program. Each compiled program is one graph id, in the order first run.
class Dumper : public runtime::Observer, public nn::Callback {
 public:
  /// `note`: where messages go (the size estimate, the max_bytes stop); default stderr.
  /// ValueError for a malformed `iteration`.
  explicit Dumper(DumpConfig config, std::function<void(const std::string&)> note = {});
  ~Dumper() override;

  /// The configuration.
  const DumpConfig& config() const { return config_; }
  /// The rank whose folder, `{path}/rank_{r}`, is written (0 unless set).
  int rank() const { return rank_; }
  /// Sets rank(); for the runs that follow.
  void set_rank(int rank) { rank_ = rank; }
  /// The number of training steps the run will make, for the size estimate (0: unknown).
  void set_total_iterations(std::int64_t n) { total_iterations_ = n; }
  /// True when the configuration dumps gradients: the training step must return them
  /// (TrainOneStepCell::set_return_gradients before its first compilation; on_train_begin does it
  /// otherwise, at the cost of a second compilation).
  bool wants_gradients() const;

  /// runtime::Observer: run_begin decides whether the run is dumped and writes the graph's
  /// parameters; each selected launch's inputs are taken before it (so no plan without in-place
  /// reuse is needed) and its outputs after it (If and While launches are not dumped, the
  /// launches inside them are); run_end writes the statistic.csv rows, and after the first dumped
  /// run of a program its execution order.
  ///@{
  void run_begin(const runtime::RunEvent& e) override;
  void run_end(const runtime::RunEvent& e) override;
  void before_launch(const runtime::LaunchEvent& e) override;
  void after_launch(const runtime::LaunchEvent& e) override;
  ///@}
  /// nn::Callback: on_train_begin makes the training step return its gradients when
  /// wants_gradients(); a training step is iteration global step - 1; on_train_step_end writes the
  /// step's gradients when its run was dumped.
  ///@{
  void on_train_begin(nn::RunContext& rc) override;
  void on_train_step_begin(nn::RunContext& rc) override;
  void on_train_step_end(nn::RunContext& rc) override;
  ///@}

  /// The bytes of .npy files written so far (statistic.csv rows are not counted).
  std::uint64_t bytes_written() const { return bytes_written_; }
  /// The .npy files written so far.
  std::int64_t files_written() const { return files_written_; }
  /// True once max_bytes stopped the dump.
  bool stopped() const { return stopped_; }

  /// Writes one tensor into the current iteration's folder (dump_file_name()) and/or its
  /// statistic row (the config's saved_data). False once max_bytes stopped the dump. Used for
  /// launches, parameters and gradients (`--check-numerics` writes its node through
  /// write_dump_npy()).
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
