/// \file
/// SummaryRecord: MindSpore's SummaryRecord for TensorBoard. One writer per run (and rank) writes
/// one event file (`events.out.tfevents.<secs>.<host>.<pid>.<n>`, summary/event_writer.h) into
/// log_dir, starting a new file past max_file_size.
///
///     summary::SummaryRecord rec("runs/lenet");
///     rec.add_scalar("loss", 0.25, step);
///     rec.add_histogram("fc.weight", weight, step);
///     rec.add_image("input", batch, step);          // CHW / HWC / NCHW batch, PNG-encoded
///     rec.add_text("note", "hello", 0);
///     rec.add_graph(*module.entry());              // name scopes from the Cell scopes
///     rec.add_hparams({{"lr", 0.1}, {"optimizer", "Momentum"}}, {"accuracy"});
///     rec.add_scalar("accuracy", 0.98, step);      // the hparams metric
///     rec.end_hparams_session(true);
///     // ~SummaryRecord flushes and closes
///
/// Each add_* reads its tensors at the call (a copy: a later in-place update of a weight does not
/// change what is recorded) and queues the event; a background thread frames and writes the events
/// in call order, woken by a batch of events, a flush or close, or every 200 ms (not per event).
/// The costly part of a histogram (bucketing a tensor's values) runs on that thread, from the
/// copy, so the caller pays a memcpy; add_deferred queues any such work. flush() returns once
/// every event queued before it is written to the OS. close() (and the destructor, also during
/// stack unwinding) writes everything queued and closes the file: nothing queued is lost when
/// training ends normally or by an exception. At most `max_queue` events wait; add_* blocks while
/// the queue is full. A write error on the background thread is rethrown (as loom::Error) by the
/// next add_*, flush() or close(); the destructor swallows it.
///
/// The encodings (shared/formats.md §3.2): scalars as Value.simple_value; histograms as
/// Value.histo with TensorFlow's default buckets (summary/histogram.h); images as Value.image (PNG,
/// colorspace = channels); text as a DT_STRING scalar tensor with plugin "text"; graphs as
/// Event.graph_def (a serialized GraphDef, summary/graph.h); hparams as the hparams plugin's
/// summaries (tags "_hparams_/experiment", "_hparams_/session_start_info",
/// "_hparams_/session_end_info", plugin "hparams", content a serialized HParamsPluginData version
/// 0, tensor DT_FLOAT of shape [0]), in the same run, as tensorboardX does.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/ir/tensor.h"
#include "summary/png.h"
#include "summary/proto/tensorboard.pb.h"

namespace loom::ir {
class FuncGraph;
}
namespace loom::runtime {
class Executable;
}

namespace loom::summary {

class EventFileWriter;

/// The options of a SummaryRecord.
struct SummaryOptions {
  std::int64_t max_file_size = 0;  ///< bytes per file; 0: one file
  std::string filename_suffix;     ///< appended to each file name
  std::size_t max_queue = 1024;    ///< events waiting for the background thread
};

/// A hyper-parameter value: a number, a string or a bool (TensorBoard's three kinds).
class HParamValue {
 public:
  /// A number (stored as a double) or a bool, implicitly.
  template <class T>
    requires std::is_arithmetic_v<T>
  HParamValue(T v) {  // NOLINT(google-explicit-constructor)
    if constexpr (std::is_same_v<T, bool>) {
      v_ = v;
    } else {
      v_ = static_cast<double>(v);
    }
  }
  /// A string, implicitly.
  ///@{
  HParamValue(std::string s) : v_(std::move(s)) {}  // NOLINT
  HParamValue(const char* s) : v_(std::string(s)) {}  // NOLINT
  ///@}
  /// The value: a double, a string or a bool.
  const std::variant<double, std::string, bool>& get() const { return v_; }

 private:
  std::variant<double, std::string, bool> v_;
};

/// MindSpore's SummaryRecord: writes TensorBoard events into log_dir (see above). Every add_*
/// throws ValueError once the record is closed, and rethrows a pending write error.
class SummaryRecord {
 public:
  /// Creates log_dir and the first event file. Throws loom::Error when it cannot.
  explicit SummaryRecord(std::string log_dir, SummaryOptions options = {});
  ~SummaryRecord();
  SummaryRecord(const SummaryRecord&) = delete;
  SummaryRecord& operator=(const SummaryRecord&) = delete;

  /// A scalar (written as a float).
  void add_scalar(const std::string& tag, double value, std::int64_t step);
  /// Any numeric tensor, on any device (copied to the host now). NaN / ±inf values are left out
  /// of the buckets (summary/histogram.h).
  void add_histogram(const std::string& tag, const Tensor& values, std::int64_t step);
  /// The histogram of `values`, bucketed at the call; NaN / ±inf values are left out.
  void add_histogram(const std::string& tag, std::span<const double> values, std::int64_t step);
  /// summary/png.h image_from_tensor: HW, CHW / HWC, or a batch NCHW / NHWC tiled 8 wide (a
  /// device tensor is copied to the host).
  void add_image(const std::string& tag, const Tensor& image, std::int64_t step,
                 ImageLayout layout = ImageLayout::kAuto);
  /// A text, shown in TensorBoard's text tab.
  void add_text(const std::string& tag, const std::string& text, std::int64_t step);
  /// A graph for TensorBoard's graph tab: a GraphDef as given, or one made from a FuncGraph or a
  /// compiled Executable (summary/graph.h: the Cell scopes become name scopes).
  ///@{
  void add_graph(const tb::GraphDef& graph, std::int64_t step = 0);
  void add_graph(const ir::FuncGraph& graph, std::int64_t step = 0);
  void add_graph(const runtime::Executable& exe, std::int64_t step = 0);
  ///@}
  /// Starts an hparams session: the Experiment (every hparam with its type; every metric tag, whose
  /// values are this run's scalars of that tag) and the SessionStartInfo with the values.
  void add_hparams(const std::map<std::string, HParamValue>& hparams,
                   const std::vector<std::string>& metric_tags, std::int64_t step = 0);
  /// SessionEndInfo with STATUS_SUCCESS or STATUS_FAILURE.
  void end_hparams_session(bool success, std::int64_t step = 0);
  /// Any event (its wall_time is set when 0).
  void add_event(tb::Event event);
  /// Events made later, on the background thread, in their place in the call order: `make` runs
  /// there (an exception from it is reported like a write error); events whose wall_time is 0 get
  /// the time of this call. `make` must own what it reads (copies of tensors).
  void add_deferred(std::function<std::vector<tb::Event>()> make);

  /// Returns once every event queued before it is written to the OS; rethrows a pending write
  /// error.
  void flush();
  /// Writes everything queued and closes the file; a second call does nothing but rethrow a
  /// pending write error.
  void close();

  /// The directory of the event files.
  const std::string& log_dir() const { return log_dir_; }
  /// The event files written so far (full paths, in order).
  std::vector<std::string> files() const;

 private:
  /// An event, or work on the background thread that makes events (`make` set).
  struct Item {
    tb::Event event;
    std::function<std::vector<tb::Event>()> make;
    double wall_time = 0;
  };
  void enqueue(tb::Event event);
  void enqueue_item(Item item);
  void worker();
  void rethrow_pending_error();  ///< caller holds mu_

  std::string log_dir_;
  SummaryOptions options_;
  std::unique_ptr<EventFileWriter> writer_;  ///< touched only by the worker once it runs

  mutable std::mutex mu_;
  std::condition_variable cv_;          ///< worker: work or closing
  std::condition_variable done_cv_;     ///< callers: progress
  std::deque<Item> queue_;
  std::uint64_t enqueued_ = 0, flushed_ = 0;
  bool closing_ = false, closed_ = false, flush_wanted_ = false;
  /// The worker wakes when this many events wait (or on flush / close / full queue), else every
  /// kWakeInterval.
  static constexpr std::chrono::milliseconds kWakeInterval{200};
  std::size_t wake_batch() const { return std::min<std::size_t>(64, options_.max_queue); }
  std::exception_ptr error_;
  std::vector<std::string> files_;
  std::thread thread_;
};

}  // namespace loom::summary
