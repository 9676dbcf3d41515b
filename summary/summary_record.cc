#include "summary/summary_record.h"

#include "backends/backend.h"
#include "core/ir/error.h"
#include "summary/event_writer.h"
#include "summary/graph.h"
#include "summary/histogram.h"
#include "summary/proto/hparams.pb.h"

namespace loom::summary {
namespace {

tb::Event make_event(std::int64_t step) {
  tb::Event e;
  e.set_wall_time(wall_time_now());
  e.set_step(step);
  return e;
}

// A summary value of the hparams plugin holding `data` (version set to 0).
tb::Event hparams_event(const std::string& tag, hparams::HParamsPluginData data,
                        std::int64_t step) {
  data.set_version(0);
  tb::Event e = make_event(step);
  tb::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  auto* pd = v->mutable_metadata()->mutable_plugin_data();
  pd->set_plugin_name("hparams");
  pd->set_content(data.SerializeAsString());
  // The hparams plugin's NULL_TENSOR: DT_FLOAT of shape [0].
  tb::TensorProto* t = v->mutable_tensor();
  t->set_dtype(tb::DT_FLOAT);
  t->mutable_tensor_shape()->add_dim()->set_size(0);
  return e;
}

}  // namespace

SummaryRecord::SummaryRecord(std::string log_dir, SummaryOptions options)
    : log_dir_(std::move(log_dir)), options_(std::move(options)) {
  if (options_.max_queue == 0) options_.max_queue = 1;
  writer_ = std::make_unique<EventFileWriter>(log_dir_, options_.max_file_size,
                                              options_.filename_suffix);
  files_ = writer_->files();
  thread_ = std::thread([this] { worker(); });
}

SummaryRecord::~SummaryRecord() {
  try {
    close();
  } catch (...) {
    // A destructor must not throw; the error was reported to any later caller already.
  }
}

void SummaryRecord::worker() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    // Woken by a batch's worth of events, a flush or close, or after kWakeInterval: not by every
    // event (a wake-up per event cost more than the events' writing at collect_freq 1).
    cv_.wait_for(lk, kWakeInterval, [&] {
      return queue_.size() >= wake_batch() || flush_wanted_ || closing_;
    });
    flush_wanted_ = false;
    if (queue_.empty() && !closing_) continue;
    if (queue_.empty()) break;  // closing and drained
    std::deque<Item> batch;
    batch.swap(queue_);
    const bool failed = error_ != nullptr;
    done_cv_.notify_all();  // room in the queue
    lk.unlock();
    std::exception_ptr err;
    if (!failed) {
      try {
        for (Item& item : batch) {
          if (!item.make) {
            writer_->write(item.event);
            continue;
          }
          for (tb::Event& e : item.make()) {
            if (e.wall_time() == 0) e.set_wall_time(item.wall_time);
            writer_->write(e);
          }
          item.make = nullptr;  // frees the copies it held
        }
        writer_->flush();
      } catch (...) {
        err = std::current_exception();
      }
    }
    lk.lock();
    if (err && !error_) error_ = err;
    files_ = writer_->files();
    flushed_ += batch.size();
    done_cv_.notify_all();
  }
}

void SummaryRecord::rethrow_pending_error() {
  if (error_) std::rethrow_exception(error_);
}

void SummaryRecord::enqueue(tb::Event event) { enqueue_item(Item{.event = std::move(event)}); }

void SummaryRecord::add_deferred(std::function<std::vector<tb::Event>()> make) {
  enqueue_item(Item{.make = std::move(make), .wall_time = wall_time_now()});
}

void SummaryRecord::enqueue_item(Item item) {
  std::unique_lock<std::mutex> lk(mu_);
  rethrow_pending_error();
  if (closing_)
    throw ValueError("SummaryRecord: expected an open record, got one already closed (" +
                     log_dir_ + ")");
  done_cv_.wait(lk, [&] { return queue_.size() < options_.max_queue || error_; });
  rethrow_pending_error();
  queue_.push_back(std::move(item));
  ++enqueued_;
  if (queue_.size() >= wake_batch()) cv_.notify_one();
}

void SummaryRecord::flush() {
  std::unique_lock<std::mutex> lk(mu_);
  const std::uint64_t target = enqueued_;
  if (!closed_ && flushed_ < target) {
    flush_wanted_ = true;
    cv_.notify_one();
    done_cv_.wait(lk, [&] { return flushed_ >= target; });
  }
  rethrow_pending_error();
}

void SummaryRecord::close() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_) {
      rethrow_pending_error();
      return;
    }
    closing_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lk(mu_);
  try {
    writer_->close();
  } catch (...) {
    if (!error_) error_ = std::current_exception();
  }
  closed_ = true;
  rethrow_pending_error();
}

std::vector<std::string> SummaryRecord::files() const {
  std::lock_guard<std::mutex> lk(mu_);
  return files_;
}

void SummaryRecord::add_event(tb::Event event) {
  if (event.wall_time() == 0) event.set_wall_time(wall_time_now());
  enqueue(std::move(event));
}

void SummaryRecord::add_scalar(const std::string& tag, double value, std::int64_t step) {
  tb::Event e = make_event(step);
  tb::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  enqueue(std::move(e));
}

void SummaryRecord::add_histogram(const std::string& tag, std::span<const double> values,
                                  std::int64_t step) {
  tb::Event e = make_event(step);
  tb::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  *v->mutable_histo() = make_histogram(values).proto;
  enqueue(std::move(e));
}

void SummaryRecord::add_histogram(const std::string& tag, const Tensor& values,
                                  std::int64_t step) {
  // A copy now (the caller may update the tensor in place), the buckets on the writer thread.
  add_deferred([tag, step, copy = values.is_host() ? values.clone() : backend::to_host(values)] {
    std::vector<tb::Event> out(1);
    tb::Event& e = out[0];
    e.set_step(step);
    tb::Summary::Value* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    *v->mutable_histo() = std::move(make_histogram(copy).proto);
    return out;
  });
}

void SummaryRecord::add_image(const std::string& tag, const Tensor& image, std::int64_t step,
                              ImageLayout layout) {
  const Image8 img = image_from_tensor(backend::to_host(image), layout);
  tb::Event e = make_event(step);
  tb::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  tb::Summary::Image* im = v->mutable_image();
  im->set_height(img.height);
  im->set_width(img.width);
  im->set_colorspace(img.channels);
  im->set_encoded_image_string(encode_png(img.pixels.data(), img.width, img.height, img.channels));
  enqueue(std::move(e));
}

void SummaryRecord::add_text(const std::string& tag, const std::string& text,
                             std::int64_t step) {
  tb::Event e = make_event(step);
  tb::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  tb::TensorProto* t = v->mutable_tensor();
  t->set_dtype(tb::DT_STRING);
  t->mutable_tensor_shape();  // a scalar: no dims
  t->add_string_val(text);
  enqueue(std::move(e));
}

void SummaryRecord::add_graph(const tb::GraphDef& graph, std::int64_t step) {
  tb::Event e = make_event(step);
  e.set_graph_def(graph.SerializeAsString());
  enqueue(std::move(e));
}

void SummaryRecord::add_graph(const ir::FuncGraph& graph, std::int64_t step) {
  add_graph(graph_def_from(graph), step);
}

void SummaryRecord::add_graph(const runtime::Executable& exe, std::int64_t step) {
  add_graph(graph_def_from(exe), step);
}

void SummaryRecord::add_hparams(const std::map<std::string, HParamValue>& values,
                                const std::vector<std::string>& metric_tags, std::int64_t step) {
  const double now = wall_time_now();
  hparams::HParamsPluginData exp_data;
  hparams::Experiment* exp = exp_data.mutable_experiment();
  exp->set_time_created_secs(now);
  hparams::HParamsPluginData start_data;
  hparams::SessionStartInfo* start = start_data.mutable_session_start_info();
  start->set_start_time_secs(now);
  for (const auto& [name, value] : values) {
    hparams::HParamInfo* info = exp->add_hparam_infos();
    info->set_name(name);
    google::protobuf::Value& pv = (*start->mutable_hparams())[name];
    const auto& var = value.get();
    if (const double* d = std::get_if<double>(&var)) {
      info->set_type(hparams::DATA_TYPE_FLOAT64);
      pv.set_number_value(*d);
    } else if (const std::string* s = std::get_if<std::string>(&var)) {
      info->set_type(hparams::DATA_TYPE_STRING);
      pv.set_string_value(*s);
    } else {
      info->set_type(hparams::DATA_TYPE_BOOL);
      pv.set_bool_value(std::get<bool>(var));
    }
  }
  for (const std::string& tag : metric_tags) exp->add_metric_infos()->mutable_name()->set_tag(tag);
  enqueue(hparams_event("_hparams_/experiment", std::move(exp_data), step));
  enqueue(hparams_event("_hparams_/session_start_info", std::move(start_data), step));
}

void SummaryRecord::end_hparams_session(bool success, std::int64_t step) {
  hparams::HParamsPluginData data;
  hparams::SessionEndInfo* end = data.mutable_session_end_info();
  end->set_status(success ? hparams::STATUS_SUCCESS : hparams::STATUS_FAILURE);
  end->set_end_time_secs(wall_time_now());
  enqueue(hparams_event("_hparams_/session_end_info", std::move(data), step));
}

}  // namespace loom::summary
