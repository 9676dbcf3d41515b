/// \file
/// MindIR (.mindir): MindSpore's inference-model file (a protobuf ModelProto; docs/formats.md,
/// "MindIR"). export_mindir writes a Cell's inference graph and its weights as MindSpore writes
/// them; load_mindir reads such a file (written by loom or by MindSpore's `mindspore.export`)
/// into a GraphCell that compiles and runs it.
///
///     models::LeNet5 net;
///     mindir::export_mindir(net, {Abstract::tensor(DType::kFloat32, {1, 1, 32, 32})},
///                           "lenet.mindir");
///     mindir::GraphCell cell = mindir::load_mindir("lenet.mindir");
///     Tensor logits = cell(x);          // x (N, 1, 32, 32): any batch size
///
/// What is written (MindSpore's attribute form, mind_ir_version 1, which MindSpore 2.0 and later
/// all load): ModelProto{ir_version "0.1.1", producer_name "loom", model_version (loom's),
/// graph, little_endian true, primitives, mind_ir_version 1}. The graph has the example inputs'
/// dtypes and shapes as inputs, the weights (raw_data little-endian) named "<graph>:<param>"
/// with ref_key = the parameter name, one CNode per op referring to a PrimitiveProto with
/// MindSpore's attribute names and types (Conv2D's 4-tuple stride and dilation, pad_list, group
/// and groups; pooling's (1, 1, h, w) kernel_size and strides; MatMul's transpose_x1/x2;
/// input_names / output_names), the operands loom keeps as attributes but MindSpore passes as
/// inputs (Reshape's shape, ReduceMean's axis, Transpose's perm) as Constant nodes, and the
/// auto-monad pattern MindSpore writes for weights (Load, MakeTuple, UpdateState, Depend).
///
/// What is read: both operator encodings — the attribute form above, and the primitive-function
/// form of MindSpore >= 2.3 (mind_ir_version 2 and 3), in which the init arguments of some ops
/// (MatMul's transpose_a/b, BatchNorm's is_training/epsilon/momentum/data_format, AvgPool's
/// kernel_size/strides/pad_mode/data_format...) are trailing Constant inputs. Load, UpdateState
/// and Depend's monad inputs are dropped (loom's IR has no side effects). Every other op must be
/// in loom's registry (ops/op.h) under MindSpore's name. Every problem is a FormatError naming
/// the file and, where there is one, the node: a file protobuf cannot parse (truncated, not
/// MindIR), missing or unresolved names, raw_data whose size is not product(dims) × element size,
/// unknown data types, and unknown ops ("MindIR lenet.mindir: unknown op 'Foo' at node 'n:3'").
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/abstract.h"
#include "core/ir/tensor.h"
#include "core/ir/value.h"

namespace loom::ir {
class Module;
class FuncGraph;
}  // namespace loom::ir
namespace loom::runtime {
class CompiledFunction;
}  // namespace loom::runtime
namespace loom::backend {
class Backend;
}  // namespace loom::backend
namespace loom::nn {
class Cell;
}  // namespace loom::nn

namespace loom::mindir {

/// The options of export_mindir and serialize_graph.
struct ExportOptions {
  /// The graph's name in the file ("" = "<Cell class>_construct"); it prefixes every node name.
  std::string graph_name;
  /// Write MindSpore's auto-monad pattern for the weights (Load / UpdateState / Depend).
  bool monads = true;
  /// Files larger than this are refused (protobuf cannot serialize a message over 2 GB).
  std::uint64_t max_bytes = 2147483647ull;
  /// Dumps the traced graph and every stage of the export pipeline as
  /// `DIR/export/NN_<stage>.ir` and `.dot` ("" = none).
  std::string save_graphs_dir;
};

/// Traces `net` in inference mode (set_train(false) for the trace; the previous mode is put back)
/// on the example inputs' abstracts (for tensors: their dtypes and shapes), runs the export
/// pipeline (core/passes/pipeline.h: inline, simplify, dce, fold_constants with the CPU kernels;
/// no fusion) and writes the MindIR file atomically (a temporary file in the same directory, then
/// rename). Throws ValueError when the model would exceed options.max_bytes ("... bytes, over
/// protobuf's 2 GB message limit"), FormatError when the file cannot be written, and ValueError
/// naming the op for an op with no MindIR encoding (control flow, fused ops).
///@{
void export_mindir(nn::Cell& net, const std::vector<ir::AbstractPtr>& example_inputs,
                   const std::string& path, const ExportOptions& options = {});
void export_mindir(nn::Cell& net, const std::vector<Tensor>& example_inputs,
                   const std::string& path, const ExportOptions& options = {});
///@}

/// The serialized ModelProto for an inferred, first-order graph whose first `num_inputs`
/// parameters are inputs and the rest weights (with defaults). What export_mindir writes.
std::string serialize_graph(const ir::FuncGraph& graph, std::size_t num_inputs,
                            const ExportOptions& options = {});

/// A graph input or output of a loaded model, as the file describes it.
struct TensorInfo {
  /// An input's user-visible name (the text after the first ':'); an output's name as written.
  std::string name;
  DType dtype = DType::kFloat32;  ///< the dtype (Float32 for an output that gives none)
  Shape shape;                    ///< the shape (empty for an output that gives none)
};

/// A loaded MindIR model: MindSpore's nn.GraphCell. Runs the graph with the file's weights; the
/// first call per input signature (dtypes and shapes) compiles (runtime::CompiledFunction), so a
/// model exported at batch 1 runs at any batch size where its ops allow.
class GraphCell {
 public:
  /// What a reader builds: the module holding `graph` (inferred; its first inputs.size()
  /// parameters are the inputs, the rest weights with their values as defaults, named as in
  /// `params`), the file's description of its inputs and outputs, its op counts and producer.
  struct Parts {
    std::unique_ptr<ir::Module> module;  ///< owns the graph
    ir::FuncGraph* graph = nullptr;      ///< the model's graph, inferred
    std::vector<TensorInfo> inputs;      ///< the graph inputs, as the file describes them
    std::vector<TensorInfo> outputs;     ///< the graph outputs, as the file describes them
    std::vector<std::pair<std::string, Tensor>> params;  ///< the weights, in graph order
    std::map<std::string, std::size_t> op_counts;        ///< the file's ops with counts
    std::string producer;                ///< the file's producer name
    std::string model_version;           ///< the file's model (or producer) version
  };
  /// A GraphCell over a graph another reader built (onnx::load_onnx).
  static GraphCell from_parts(Parts parts);

  /// A GraphCell moves; it is not copyable.
  ///@{
  GraphCell(GraphCell&&) noexcept;
  GraphCell& operator=(GraphCell&&) noexcept;
  ///@}
  ~GraphCell();

  /// Runs on `inputs` (one per graph input; host tensors or tensors on the cell's device, copied
  /// there). Throws ValueError on a wrong count or dtype. run returns the output (the first leaf
  /// when the graph returns a tuple); run_value returns the whole output value; operator() is
  /// run (on the single input x for a one-input model). Results are on the cell's device
  /// (backend::to_host reads them).
  ///@{
  Tensor run(const std::vector<Tensor>& inputs);
  ir::Value run_value(const std::vector<Tensor>& inputs);
  Tensor operator()(const std::vector<Tensor>& inputs) { return run(inputs); }
  Tensor operator()(const Tensor& x) { return run({x}); }
  ///@}

  /// The graph inputs, in order.
  const std::vector<TensorInfo>& inputs() const { return inputs_; }
  /// The graph outputs, in order (dtype and shape as written in the file).
  const std::vector<TensorInfo>& outputs() const { return outputs_; }
  /// The weights as read (host tensors), in file order, by parameter name (ref_key, else the
  /// text after the first ':').
  const std::vector<std::pair<std::string, Tensor>>& parameters() const { return params_; }
  /// Ops in the file (MindSpore's names, as written, before Load/Depend are dropped) with counts.
  const std::map<std::string, std::size_t>& op_counts() const { return op_counts_; }
  /// The file's producer_name ("loom" for a file loom wrote).
  const std::string& producer() const { return producer_; }
  /// The file's model_version.
  const std::string& model_version() const { return model_version_; }
  /// The file's mind_ir_version (0 when absent).
  std::int64_t mind_ir_version() const { return mind_ir_version_; }
  /// The loom graph built from the file (inputs, then weights with defaults).
  ir::FuncGraph& graph() const { return *graph_; }
  /// The compiled function running it: observers (dumps, `--check-numerics`), save_graphs.
  runtime::CompiledFunction& compiled_function();

  /// Where the cell compiles and runs: the CPU unless moved. to_device copies the weights to
  /// `backend`'s device once (parameters() stays the file's host values) and recompiles there on
  /// the next call, keeping the observers installed so far.
  void to_device(backend::Backend& backend);
  /// The backend the cell runs on (the CPU backend unless moved by to_device).
  backend::Backend& device_backend() const;

 private:
  friend GraphCell parse_mindir(const void* data, std::size_t size, const std::string& what);
  GraphCell();
  std::unique_ptr<ir::Module> module_;
  ir::FuncGraph* graph_ = nullptr;
  std::unique_ptr<runtime::CompiledFunction> fn_;
  backend::Backend* backend_ = nullptr;  ///< null: the CPU
  std::vector<Tensor> device_weights_;   ///< the weights on backend_'s device (not the CPU)
  std::vector<TensorInfo> inputs_, outputs_;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::map<std::string, std::size_t> op_counts_;
  std::string producer_, model_version_;
  std::int64_t mind_ir_version_ = 0;
};

/// Reads a .mindir file. FormatError naming the file on any problem (see above).
GraphCell load_mindir(const std::string& path);
/// The same from bytes in memory; `what` names them in messages.
GraphCell parse_mindir(const void* data, std::size_t size, const std::string& what);

}  // namespace loom::mindir
