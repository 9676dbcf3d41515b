/// \file
/// SummaryCollector: MindSpore's SummaryCollector callback, writing TensorBoard event files
/// through a SummaryRecord.
///
///     summary::SummaryCollector sc("runs/lenet", {.collect_freq = 10,
///         .collect_specified_data = {.histogram_regular = "^conv"},
///         .custom_lineage_data = {{"learning_rate", 0.01}, {"optimizer", "Momentum"},
///                                 {"seed", 1}}});
///     model.train(epochs, ds, {&sc});
///
/// What it collects (collect_specified_data; with keep_default_action = true an unset field takes
/// its default, with false an unset field is off):
///
///     collect_metric (default on)     scalar "loss" (the step's loss, its mean when not a scalar)
///                                     at the first step and every collect_freq-th global step;
///                                     eval metrics (run context's metrics at an epoch end or at
///                                     on_eval_end) as scalars named after the metric ("loss"
///                                     becomes "eval_loss": it is not the training loss).
///     collect_learning_rate (on)      scalar "learning_rate" at the same steps: the rate the step
///                                     just ran with (the optimizer's rate at that step, so a
///                                     schedule shows), or, without a train_network in the run
///                                     context, custom_lineage_data["learning_rate"].
///     collect_graph (on)              the step graph once, after the first step, with the Cell
///                                     scopes as name scopes (summary/graph.h):
///                                     TrainOneStepCell::step_graph(), else last_executable().
///     collect_input_data (on)         once, at the first collected step: the images given with
///                                     set_input_images(), else that step's batch (run context's
///                                     data) (tag "input_data/auto"; NCHW batches tiled). Float
///                                     images with values outside [0, 1] (normalized inputs) are
///                                     scaled min..max → 0..1 first.
///     collect_gradients (OFF unless   histograms "<param>/grad" of the gradients of the parameters
///       set true, also with           the histogram selection takes (below), and scalars
///       keep_default_action)          "gradient_norm/<param>" and "gradient_norm" (the global L2
///                                     norm over every gradient), at the collected steps. It needs
///                                     the step to return its gradients: on_train_begin calls
///                                     train_network->set_return_gradients(true) (callers that
///                                     build the step earlier ask wants_gradients()). That costs
///                                     one more compilation per signature and extra step outputs,
///                                     so it is opt-in. The outputs stay on every step, collected
///                                     or not: on LeNet they cost no measurable time, while
///                                     switching them off between collected steps would compile the
///                                     step twice.
///     histogram_regular (default:     histograms "<param>/auto" of the network's parameters whose
///       the first five parameters)    names match the regular expression (ECMAScript, anchored at
///                                     the start as Python's re.match), at the collected steps.
///     collect_train_lineage (on)      an hparams session (TensorBoard's HParams view): model (the
///                                     network's class name), batch_size, epoch_num, seed
///                                     (random::global_seed()), and every custom_lineage_data entry
///                                     (learning_rate, optimizer..., overriding those) as hparams,
///                                     with metrics "loss" and, with collect_eval_lineage,
///                                     "accuracy" (the final accuracy is the last "accuracy"
///                                     scalar). Ended STATUS_SUCCESS at on_train_end;
///                                     STATUS_FAILURE when the collector is destroyed before that
///                                     (training ended by an exception).
///     collect_eval_lineage (on)       see above.
///
/// Cost on the training thread, at a collected step: copies of the selected parameters (the next
/// step updates them in place) and references to the returned gradients; the histograms and norms
/// are computed by an IdleWorker (summary/idle_worker.h: a thread that runs only where a core
/// would otherwise idle) and written after the step's scalars. At most four collected steps wait;
/// past that the training thread computes the oldest itself on the kernels' pool. The graph and
/// the input image are recorded once per run (MindSpore collects the input data at the first step
/// only).
/// bench/README.md ("Summaries") has the cost.
///
/// Everything queued is written when training ends (flush at on_train_end) and when the collector
/// is destroyed, also during stack unwinding.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "core/ir/tensor.h"
#include "nn/callback.h"
#include "summary/distributions.h"
#include "summary/idle_worker.h"
#include "summary/summary_record.h"

namespace loom::summary {

/// MindSpore's collect_specified_data: what SummaryCollector collects, each field described
/// above. An unset field follows SummaryCollectorOptions::keep_default_action.
struct CollectSpecifiedData {
  std::optional<bool> collect_metric;         ///< training loss and eval metrics
  std::optional<bool> collect_learning_rate;  ///< scalar "learning_rate"
  std::optional<bool> collect_graph;          ///< the step graph, once
  std::optional<bool> collect_input_data;     ///< input images, once
  /// Parameters whose histograms are recorded (ECMAScript, anchored at the start); unset: the
  /// first five, or none with keep_default_action false.
  std::optional<std::string> histogram_regular;
  std::optional<bool> collect_train_lineage;  ///< the hparams session
  std::optional<bool> collect_eval_lineage;   ///< its "accuracy" metric
  std::optional<bool> collect_gradients;  ///< off unless true (see above)
};

/// The options of a SummaryCollector, MindSpore's arguments.
struct SummaryCollectorOptions {
  std::int64_t collect_freq = 10;  ///< in steps; ValueError when < 1
  CollectSpecifiedData collect_specified_data;  ///< what to collect
  /// True: an unset collect_specified_data field takes its default; false: it is off.
  bool keep_default_action = true;
  std::int64_t max_file_size = 0;  ///< bytes per event file; 0: no limit
  /// Extra hparams of the lineage session (overriding the collected ones of the same name).
  std::map<std::string, HParamValue> custom_lineage_data;
};

/// The collections by name, as `loom train --summary-collect` takes them: collect_specified_data's
/// keys without "collect_" — metric, learning_rate, graph, input_data, histogram, train_lineage,
/// eval_lineage, gradients ("histogram" is the parameter histograms: histogram_regular's selection,
/// the first five parameters by default).
const std::vector<std::string>& collection_names();

/// Applies one "+NAME" (collect it) or "-NAME" (do not) over what `options` selects already:
///
///     SummaryCollectorOptions o;                 // MindSpore's defaults
///     select_collection(o, "+gradients");        // collect_gradients = true
///     select_collection(o, "-histogram");        // no parameter histograms
///
/// MindSpore has no switch for the parameter histograms (they are off only when histogram_regular
/// is left out with keep_default_action = false), so "-histogram" sets every unset field to what it
/// means now, clears histogram_regular and sets keep_default_action to false; "+histogram" keeps a
/// histogram_regular already given, else selects the first five the same way (keep_default_action
/// true, every other field explicit). ValueError ("expected +NAME or -NAME with NAME one of metric,
/// ..., gradients, got '<item>'") for anything else.
void select_collection(SummaryCollectorOptions& options, const std::string& item);

/// MindSpore's SummaryCollector callback (see above).
class SummaryCollector : public nn::Callback {
 public:
  /// Creates summary_dir and its event file. ValueError on collect_freq < 1 or a bad regex.
  explicit SummaryCollector(std::string summary_dir, SummaryCollectorOptions options = {});
  ~SummaryCollector() override;

  /// Asks the step for its gradients when collecting them.
  void on_train_begin(nn::RunContext& rc) override;
  /// At its first step the hparams session and the graph; at that step and every collect_freq-th
  /// global step the scalars, the input images (once), histograms and norms, as selected.
  void on_train_step_end(nn::RunContext& rc) override;
  /// Records the run context's metrics as scalars (see collect_metric above).
  void on_train_epoch_end(nn::RunContext& rc) override;
  /// Finishes the pending histograms, ends the hparams session with STATUS_SUCCESS and flushes.
  void on_train_end(nn::RunContext& rc) override;
  /// Records the run context's metrics as scalars (see collect_metric above).
  void on_eval_end(nn::RunContext& rc) override;

  /// Input images to record once, at the next collected step (when collect_input_data is on).
  void set_input_images(const Tensor& images);
  /// Whether this collector records gradients (TrainOneStepCell::set_return_gradients needed).
  bool wants_gradients() const { return gradients_; }

  /// The SummaryRecord it writes with (for events of the caller's own).
  SummaryRecord& record() { return *record_; }

 private:
  bool want(const std::optional<bool>& flag) const;
  void record_metrics(const std::map<std::string, double>& metrics);
  void start_lineage(nn::RunContext& rc);
  /// Whether parameter `name` (the index-th) is in the histogram selection.
  bool histogram_selected(const std::string& name, int taken) const;
  /// The parameters whose histograms are recorded and which gradients get histograms: looked up
  /// once per training (the regular expression is not matched at every step).
  void select_distributions(nn::RunContext& rc);
  /// A collected step's histograms and norms: its values taken, the work posted to the idle
  /// thread. Null when there is nothing to record.
  struct PendingDistributions {
    std::unique_ptr<StepValues> values;
    std::vector<tb::Event> events;
    std::shared_ptr<IdleWorker::Job> job;
  };
  std::shared_ptr<PendingDistributions> post_distributions(nn::RunContext& rc, std::int64_t step);

  SummaryCollectorOptions options_;
  bool metric_, lr_, graph_, input_, train_lineage_, eval_lineage_, gradients_;
  std::optional<std::regex> histogram_regex_;  ///< unset with histograms on: the first five
  bool histograms_ = false;
  /// Declared before record_: destroyed after it, whose writer may wait for the idle jobs.
  std::unique_ptr<IdleWorker> idle_;
  std::unique_ptr<SummaryRecord> record_;
  Tensor pending_images_;
  bool graph_done_ = false, first_step_ = true, session_open_ = false, input_done_ = false;
  std::int64_t last_step_ = 0;
  /// Collected steps not yet computed by the idle thread at most; past it the training thread
  /// computes the oldest itself.
  static constexpr std::size_t kMaxPendingSteps = 4;
  const nn::Cell* selected_for_ = nullptr;  ///< the network selection_ belongs to
  std::shared_ptr<const DistributionSelection> selection_;
  std::mutex spare_mu_;
  std::vector<std::unique_ptr<StepValues>> spare_;  ///< copies' storage, reused
};

}  // namespace loom::summary
