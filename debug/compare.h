/// \file
/// Comparing two dumps tensor by tensor — `loom compare A B` (tools/compare_cmd.h) — with msprobe's
/// columns and pass rule, MindStudio's extra measures, and the first failing node in A's execution
/// order (docs/design.md "debug/"). A plays msprobe's "NPU" side (the run under test), B the
/// "Bench" (the reference).
///
/// ```
/// debug::DumpDir a = debug::open_dump("A"), b = debug::open_dump("B");
/// debug::CompareResult r = debug::compare_dumps(a, b);
/// if (const debug::CompareRow* f = r.first_failure()) std::cout << debug::describe_node(*f);
/// debug::write_compare_csv(r, "compare.csv");
/// ```
///
/// Matching: a tensor of A and one of B match when they have the same graph id, iteration and
/// DumpTensor::key() ("Conv2D-op3.output.0", "Parameter.fc1.weight.output.0"); a key written
/// several times in one iteration (a launch inside a loop) matches occurrence by occurrence, in
/// timestamp order. With a mapping (B's names are foreign, e.g. a PyTorch reference), a B tensor
/// matches the A tensor whose key the mapping gives for its key, and B tensors the mapping does
/// not name are not compared. The mapping file is one JSON object `{"<B key>": "<A key>", ...}`:
///
/// ```
/// {"conv1.weight.output.0": "Parameter.conv1.weight.output.0",
///  "conv1.output.0": "Conv2D-op0.output.0"}
/// ```
///
/// Tensors with no partner are listed as only in A / only in B; they are not failures, but when
/// nothing matches at all compare_dumps throws a ValueError saying what each side holds.
///
/// Measures (TensorMetrics), in double precision over the flattened values a (A) and b (B) of
/// equal shapes (dtypes may differ: a Float32 run against a Float64 reference). NaN and ±Inf at the
/// same positions with the same value on both sides are compared as 0 (msprobe's handle_inf_nan,
/// which also equates +Inf with -Inf: loom does not); at different positions every measure is N/A
/// and the tensor fails.
/// - Cosine: a·b / (‖a‖‖b‖); 1 when both ‖a‖, ‖b‖ ≤ ε (ε = 2.22e-16, float64's epsilon,
///   msprobe's Const.FLOAT_EPSILON); undefined for one-element tensors and when exactly one side
///   is all zeros (msprobe: "unsupported", "Nan")
/// - EucDist: ‖a − b‖ (msprobe)
/// - MaxAbsErr: max |a − b|
/// - MaxRelativeErr: max r, r = |a − b| / |b| per element, where b = 0 is replaced by ε on both
///   sides (msprobe's get_relative_err: r = |(a + ε) − ε| / ε)
/// - One Thousandth Err Ratio, Five Thousandths Err Ratio: the fraction of elements with
///   r < 0.001, r < 0.005 (msprobe's names and definition)
/// - MeanAbsErr: mean |a − b|; RMSE: sqrt(mean (a − b)²) (MindStudio)
/// - RelativeEucDist: ‖a − b‖ / ‖b‖; 0 when both are 0, +Inf when only ‖b‖ is (MindStudio's
///   RelativeEuclideanDistance)
/// - KLDivergence: MindStudio's KullbackLeiblerDivergence: each side min-max scaled to [0, 1]
///   (left as is when max = min), floored at float32's epsilon, divided by its sum into p (A) and
///   q (B); Σ p log(p / q), 0 when below ε
///
/// Pass rule ("Accuracy Reached or Not", msprobe's check_accuracy): No when Cosine < 0.99 and
/// MaxAbsErr > 0.001, or Cosine < 0.9, or MaxAbsErr > 1, or N/A (NaN/Inf positions differ);
/// "Unmatched" (a failure) when the shapes differ. Where the cosine is undefined, loom fails the
/// tensor when MaxAbsErr > 0.001 (msprobe would say "None" for a one-element tensor and pass a
/// zero tensor against a non-zero one up to MaxAbsErr 1). Empty tensors of equal shapes pass.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/tensor.h"
#include "debug/dump_reader.h"

namespace loom::debug {

/// The measures of one pair of tensors; NaN where undefined (written "N/A").
struct TensorMetrics {
  double cosine = 0;                      ///< Cosine: a·b / (‖a‖‖b‖)
  double euc_dist = 0;                    ///< EucDist: ‖a − b‖
  double max_abs_err = 0;                 ///< MaxAbsErr: max |a − b|
  double max_relative_err = 0;            ///< MaxRelativeErr: max |a − b| / |b| (b = 0 as ε)
  double one_thousandth_err_ratio = 0;    ///< fraction of elements with relative error < 0.001
  double five_thousandths_err_ratio = 0;  ///< fraction of elements with relative error < 0.005
  double mean_abs_err = 0;                ///< MeanAbsErr: mean |a − b|
  double rmse = 0;                        ///< RMSE: sqrt(mean (a − b)²)
  double relative_euc_dist = 0;           ///< RelativeEucDist: ‖a − b‖ / ‖b‖
  double kl_divergence = 0;               ///< KLDivergence: Σ p log(p / q) (above)
  std::int64_t nonfinite = 0;      ///< NaN/Inf elements at the same places, compared as 0
  bool nonfinite_mismatch = false;  ///< NaN/Inf at different places: every measure N/A
  std::string message;              ///< why a measure is undefined, in msprobe's Err_message spirit
};

/// The measures of a (A's values) against b (B's); both the same length (ValueError otherwise).
/// Empty sides give NaN cosine, error ratios and KLDivergence, the other measures 0.
TensorMetrics compare_values(const std::vector<double>& a, const std::vector<double>& b);

/// The verdict on one compared pair, msprobe's "Accuracy Reached or Not": kYes (passed), kNo
/// (failed the pass rule) or kUnmatched (the shapes differ: a failure).
enum class Accuracy { kYes, kNo, kUnmatched };
/// The verdict as the CSV writes it: "Yes", "No", "Unmatched".
const char* accuracy_name(Accuracy a);
/// msprobe's pass rule with loom's rule for an undefined cosine (above); kYes when `numel` is 0;
/// never kUnmatched.
Accuracy accuracy_of(const TensorMetrics& m, std::int64_t numel);

/// max, min, mean and L2 norm of one side (msprobe's NPU/Bench max, min, mean, l2norm); NaN when
/// the tensor holds a NaN or is empty.
struct SideStats {
  /// The largest and smallest value, the mean and the L2 norm (max, min, mean, l2norm).
  ///@{
  double max = 0, min = 0, mean = 0, l2norm = 0;
  ///@}
};
/// The statistics of one side's values `v` (above).
SideStats side_stats(const std::vector<double>& v);

/// One compared pair.
struct CompareRow {
  /// The tensor files of A and B (a, b).
  ///@{
  DumpTensor a, b;
  ///@}
  std::int64_t occurrence = 0;  ///< 0 for the first time a key is written in its iteration
  /// The dtypes of A's and B's tensors (a_dtype, b_dtype), MindSpore's names ("Float32").
  ///@{
  std::string a_dtype, b_dtype;
  ///@}
  /// The shapes of A's and B's tensors (a_shape, b_shape).
  ///@{
  Shape a_shape, b_shape;
  ///@}
  TensorMetrics metrics;         ///< zero-initialized and unused when the shapes differ
  /// The statistics of A's and B's values (a_stats, b_stats), also when the shapes differ.
  ///@{
  SideStats a_stats, b_stats;
  ///@}
  Accuracy accuracy = Accuracy::kYes;  ///< the verdict (the pass rule, or kUnmatched)
  std::string message;           ///< Err_message: the shape or NaN/Inf mismatch, dtype notes, ...
  std::optional<ExecutionOrderRow> node;  ///< A's execution-order row for the tensor's op

  /// True when accuracy is kYes.
  bool passed() const { return accuracy == Accuracy::kYes; }
  /// The names in the CSV: the tensor's key ("Conv2D-op3.output.0"), with "#2" appended for a
  /// repeated key's occurrence 1, "#3" for occurrence 2, ...; a_name() for A, b_name() for B.
  ///@{
  std::string a_name() const;
  std::string b_name() const;
  ///@}
};

/// What compare_dumps() compares.
struct CompareOptions {
  std::map<std::string, std::string> mapping;  ///< B key -> A key; empty: match by key
  std::optional<std::int64_t> graph;           ///< only this graph id
  std::optional<std::int64_t> iteration;       ///< only this iteration
};

/// The result of compare_dumps().
struct CompareResult {
  /// The dumps' paths as given (a_path, b_path).
  ///@{
  std::string a_path, b_path;
  ///@}
  std::vector<CompareRow> rows;  ///< in A's execution order (below)
  /// The selected tensors of A and of B that have no partner (only_in_a, only_in_b).
  ///@{
  std::vector<DumpTensor> only_in_a, only_in_b;
  ///@}
  std::vector<DumpTensor> not_mapped;        ///< with a mapping: B tensors it does not name
  std::vector<std::string> unused_mappings;  ///< mapping keys that name no tensor of B

  /// The rows that passed.
  std::int64_t passed() const;
  /// The rows that failed (kNo or kUnmatched).
  std::int64_t failed() const;
  /// The first failing row in A's execution order, or null.
  const CompareRow* first_failure() const;
};

/// Compares every matched pair (loading each tensor once). Rows are ordered by graph, iteration,
/// then the index of the tensor's op in A's execution-order file (a Parameter or Gradient file,
/// which has no row, goes after the launches written before it), then timestamp. ValueError for a
/// tensor file that cannot be read, and when nothing matches.
CompareResult compare_dumps(const DumpDir& a, const DumpDir& b, const CompareOptions& options = {});

/// The mapping file (above). ValueError naming `source` for invalid JSON, a value that is not an
/// object of strings, an empty object, an empty key, or two B keys mapped to one A key.
std::map<std::string, std::string> parse_mapping(const std::string& json_text,
                                                 const std::string& source);
/// Reads and parses a mapping file (parse_mapping, naming `file`); ValueError when it cannot be
/// opened.
std::map<std::string, std::string> load_mapping(const std::string& file);

/// The CSV's columns: msprobe's (NPU Name, Bench Name, NPU Dtype, Bench Dtype, NPU Tensor Shape,
/// Bench Tensor Shape, Cosine, EucDist, MaxAbsErr, MaxRelativeErr, One Thousandth Err Ratio, Five
/// Thousandths Err Ratio, NPU max, NPU min, NPU mean, NPU l2norm, Bench max, Bench min, Bench mean,
/// Bench l2norm, Accuracy Reached or Not, Err_message), then loom's (MeanAbsErr, RMSE,
/// RelativeEucDist, KLDivergence, Op Type, Cell, File, Line, Role, Forward, Full Name, Graph,
/// Iteration, NPU File, Bench File).
const std::vector<std::string>& compare_csv_columns();
/// The CSV as RFC 4180 text: a header of compare_csv_columns(), then one row per compared pair in
/// the order of `rows`; numbers in their shortest round-trip form, undefined measures "N/A".
std::string compare_csv(const CompareResult& r);
/// Writes compare_csv(r) to `path`; ValueError naming the file when it cannot be written.
void write_compare_csv(const CompareResult& r, const std::string& path);

/// The node of a row for a person: "Conv2D Conv2D-op3, full name
/// WithLossCell/_backbone/conv2/Conv2D-op3, models/lenet.cc:42, backward of
/// WithLossCell/_backbone/conv2" (a Parameter/Gradient file says so; a launch missing from A's
/// execution order says that).
std::string describe_node(const CompareRow& row);
/// "compared 84 tensors: 84 passed, 0 failed; 3 only in A, 0 only in B"
std::string summary_line(const CompareResult& r);

}  // namespace loom::debug
