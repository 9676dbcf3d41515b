/// \file
/// The distributions a SummaryCollector records at a collected step: histograms of the selected
/// parameters ("<param>/auto"), and with collect_gradients the gradients' histograms
/// ("<param>/grad") with their norms ("gradient_norm/<param>") for the selected ones, and the
/// global norm over every gradient ("gradient_norm").
///
/// The values are taken at the step (StepValues::take: the parameters copied, since the next step
/// updates them in place; the gradients referenced: each step returns new tensors) and the events
/// computed later, on any thread (compute_distributions), so that the work can run where a core is
/// idle (summary/idle_worker.h) rather than between two training steps.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/tensor.h"
#include "summary/proto/tensorboard.pb.h"

namespace loom::summary {

/// Which parameters and gradients, fixed for a training run.
struct DistributionSelection {
  std::vector<std::string> param_tags;      ///< "<param>/auto"
  std::vector<const Tensor*> params;        ///< their live values
  std::vector<std::string> gradient_names;  ///< every gradient's parameter, in gradients() order
  std::vector<char> gradient_histogram;     ///< per gradient: histogram and norm tag recorded
};

/// A tensor's values at the step: float32 as is, any other dtype as doubles (the histogram
/// converts them so anyway).
struct ValuesCopy {
  std::vector<float> f;     ///< the values of a Float32 tensor
  std::vector<double> d;    ///< the values of a tensor of any other dtype
  bool float32 = false;     ///< true: f holds the values; false: d
  void assign(const Tensor& t);  ///< reuses the vectors' storage
};

/// One collected step's inputs. Reused from step to step (the copies keep their storage).
struct StepValues {
  std::shared_ptr<const DistributionSelection> selection;  ///< what was taken
  std::int64_t step = 0;                                   ///< the global step
  std::vector<ValuesCopy> params;  ///< per selection->params
  std::vector<Tensor> gradients;   ///< per selection->gradient_names; empty without gradients

  /// Takes the parameters' values (copies) and the gradients (references to host ones, host
  /// copies of device ones; `gradients` null: none) now.
  void take(std::shared_ptr<const DistributionSelection> sel, std::int64_t step,
            const std::vector<std::pair<std::string, Tensor>>* gradients);
};

/// The events, in the order the collector writes them. With use_pool, the work is spread over the
/// kernels' thread pool (each histogram's moments and blocks of its values, HistogramParts, and
/// each other gradient's norm are tasks, largest first); without, it runs on the calling thread.
/// The events are the same either way.
std::vector<tb::Event> compute_distributions(const StepValues& in, bool use_pool);

}  // namespace loom::summary
