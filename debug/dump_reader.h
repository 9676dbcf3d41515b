/// \file
/// Reading a dump written in MindSpore's CPU/GPU layout (debug/dump.h writes it; docs/design.md
/// "debug/" has the layout), by loom or by a reference run:
///
/// ```
/// debug::DumpDir d = debug::open_dump("dump");          // {path} or {path}/rank_0
/// for (const debug::DumpTensor& t : d.tensors) { ... t.op_name, t.io, t.slot, t.path ... }
/// Tensor x = debug::load(t);                              // the .npy
/// ```
///
/// File names are parsed from the right — {op_type}.{op_name}.{task}.{stream}.{timestamp}.
/// {input|output}.{slot}.{format}.npy — because op names may hold dots (Parameter.fc1.weight...).
/// Errors (a missing folder, no rank_* folder, a file name outside the layout, a malformed CSV, a
/// truncated .npy) are ValueErrors naming the file; nothing is skipped silently. So are an empty
/// iteration folder and any entry outside the layout (a stray file beside the tensors, a graph or
/// iteration folder whose name is not a number); .dump_metadata/ is expected and not read, and of
/// MindSpore's own files the .pb graphs and ms_global_execution_order_graph_*.csv are not read.
/// An execution-order file is loom's (header index,op_type,op_name,full_name,scope,file,line,role,
/// forward,depth,graph; fields CSV-quoted with "" escapes) or MindSpore's bare list of full names.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/tensor.h"

namespace loom::debug {

/// One dumped tensor file.
struct DumpTensor {
  int rank = 0;                ///< {r} of the rank_{r} folder
  std::string net;             ///< {net_name}
  std::int64_t graph = 0;      ///< {graph_id}
  std::int64_t iteration = 0;  ///< {iteration_id}; -1 for MindSpore's {graph_id}/constants/
  std::string op_type;         ///< "Conv2D", "Parameter", "Gradient"
  std::string op_name;         ///< "Conv2D-op3", "fc1.weight"
  /// The file name's {task} and {stream} (task, stream; loom writes 0 for both).
  ///@{
  std::int64_t task = 0, stream = 0;
  ///@}
  std::int64_t timestamp = 0;  ///< microseconds; strictly increasing in loom's dumps
  std::string io;              ///< "input" or "output"
  std::int64_t slot = 0;       ///< the input's or output's index in its launch
  std::string format;          ///< "DefaultFormat"
  std::string path;            ///< the file
  /// The key tensors are matched by across two dumps, "{op_name}.{io}.{slot}" (Parameter and
  /// Gradient files: "Parameter.{name}.output.0", "Gradient.{name}.output.0", since a parameter and
  /// a node may share a name).
  std::string key() const;
};

/// One row of an execution-order file (ms_execution_order_graph_{g}.csv).
/// MindSpore's bare list of full names fills index, full_name, op_name, scope (the full name's
/// path) and op_type (op_name before "-op"); the other fields stay empty.
struct ExecutionOrderRow {
  std::int64_t index = 0;  ///< the launch's place in the execution order, from 0
  /// The launch's op type ("Conv2D"), dump name ("Conv2D-op3", DumpTensor::op_name), full name
  /// (its Cell scope's path ending with the dump name), Cell scope and source file.
  ///@{
  std::string op_type, op_name, full_name, scope, file;
  ///@}
  int line = 0;         ///< the source line; 0 when unknown
  std::string role;     ///< "forward", "backward", "optimizer"
  std::string forward;  ///< for a gradient node: the scope of the forward node it differentiates
  int depth = 0;        ///< 0 for the function's own launches, +1 inside each If / While
  std::string graph;    ///< the IR graph holding the node
};

/// One row of a statistic.csv: its columns by header name, as text.
struct StatisticRow {
  std::map<std::string, std::string> columns;  ///< header name -> field ("Op Name" -> "Conv2D-op3")
};

/// One rank's dump, read by open_dump().
struct DumpDir {
  std::string path;  ///< as given
  int rank = 0;      ///< the rank read
  std::vector<DumpTensor> tensors;  ///< every .npy, ordered by (graph, iteration, timestamp)
  /// Per graph id: the execution-order rows (no entry when the file is absent).
  std::map<std::int64_t, std::vector<ExecutionOrderRow>> execution_order;
  /// Per graph id: the IR text (graphs/ms_output_trace_code_graph_{g}.ir).
  std::map<std::int64_t, std::string> graph_ir;
  /// Per (graph, iteration): the statistic.csv rows, when present.
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<StatisticRow>> statistics;

  /// The execution-order row of an op name in a graph, or null.
  const ExecutionOrderRow* find_node(std::int64_t graph, const std::string& op_name) const;
};

/// Parses one dump file name (no directory); nullopt when it is not in the layout.
std::optional<DumpTensor> parse_dump_file_name(const std::string& file_name);

/// Opens {path} (one rank_* folder inside; `rank` picks one when there are several) or a
/// {path}/rank_{r} folder itself. ValueError as above.
DumpDir open_dump(const std::string& path, std::optional<int> rank = std::nullopt);

/// The tensor of a dump file (data::load_npy); ValueError naming the file when unreadable.
Tensor load(const DumpTensor& t);

}  // namespace loom::debug
