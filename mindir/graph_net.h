/// \file
/// A loaded MindIR model as a trainable Cell: fine-tuning a network MindSpore (or loom) exported.
///
///     auto net = mindir::load_mindir_net("lenet.mindir");   // the file's weights: Parameters
///     nn::TrainOneStepCell step(
///         std::make_shared<nn::WithLossCell>(
///             net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true)),
///         {.kind = nn::OptimizerKind::kMomentum, .learning_rate = 0.01, .momentum = 0.9});
///     step.step(x, labels);                                  // trains the loaded weights
///     checkpoint::save_checkpoint(*net, "lenet.ckpt");       // MindSpore's names and format
///
/// GraphNet's construct replays the loaded graph (mindir::GraphCell::graph()) node by node
/// through the current emitter, so it runs in PyNative and graph mode, is traced, differentiated
/// and compiled like any Cell, and its weights are Parameters named as in the file (ref_key, the
/// names of MindSpore's network: "conv1.weight", "fc1.bias"), which is what a checkpoint saved
/// from it needs for MindSpore's load_checkpoint / load_param_into_net. The weights a BatchNorm
/// reads as its mean and variance (inputs 3 and 4) are state, not trained (requires_grad false).
/// MindSpore exports inference graphs, so a BatchNorm in the file keeps is_training false:
/// fine-tuning trains with its statistics frozen, as fine-tuning with a frozen BatchNorm does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mindir/mindir.h"
#include "nn/cell.h"

namespace loom::mindir {

/// A Cell running a loaded MindIR graph with its weights as trainable Parameters (see above).
class GraphNet : public nn::Cell {
 public:
  /// Takes over a loaded model; its weights become this Cell's Parameters.
  explicit GraphNet(GraphCell cell);
  /// The graph's output for its inputs (one Var per graph input).
  ops::Var construct(const std::vector<ops::Var>& inputs) override;
  /// The loaded model (inputs, outputs, the file's op counts).
  const GraphCell& graph_cell() const { return cell_; }

 private:
  GraphCell cell_;
  std::vector<nn::Parameter*> weights_;  ///< per graph weight, in the graph's parameter order
};

/// load_mindir(path) as a GraphNet. FormatError naming the file on a file loom cannot read.
std::shared_ptr<GraphNet> load_mindir_net(const std::string& path);

/// The loaded graph `g` replayed through `e`: `inputs` for its first inputs.size() parameters,
/// `weights` for the rest (one per weight, in order); returns its output. What GraphNet's
/// construct does with its Parameters, and Python's nn.GraphCell inside a trace with the file's
/// weights as constants. ValueError for a call of another graph (control flow), which a replay
/// cannot take in, and for a count of inputs and weights that is not the graph's.
ops::Var emit_graph(ops::Emitter& e, const ir::FuncGraph& g, const std::vector<ops::Var>& inputs,
                    const std::vector<ops::Var>& weights);

}  // namespace loom::mindir
