#include "summary/collector.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/random/random.h"
#include "backends/thread_pool.h"
#include "core/ir/error.h"
#include "nn/cell.h"
#include "nn/train.h"
#include "summary/histogram.h"

namespace loom::summary {

SummaryCollector::SummaryCollector(std::string summary_dir, SummaryCollectorOptions options)
    : options_(std::move(options)) {
  if (options_.collect_freq < 1)
    throw ValueError("SummaryCollector: expected collect_freq >= 1, got " +
                     std::to_string(options_.collect_freq));
  const CollectSpecifiedData& c = options_.collect_specified_data;
  metric_ = want(c.collect_metric);
  lr_ = want(c.collect_learning_rate);
  graph_ = want(c.collect_graph);
  input_ = want(c.collect_input_data);
  train_lineage_ = want(c.collect_train_lineage);
  eval_lineage_ = want(c.collect_eval_lineage);
  gradients_ = c.collect_gradients.value_or(false);
  if (c.histogram_regular) {
    histograms_ = true;
    try {
      histogram_regex_.emplace(*c.histogram_regular);
    } catch (const std::regex_error& e) {
      throw ValueError("SummaryCollector: expected a valid histogram_regular, got '" +
                       *c.histogram_regular + "' (" + e.what() + ")");
    }
  } else {
    histograms_ = options_.keep_default_action;  // default: the first five parameters
  }
  record_ = std::make_unique<SummaryRecord>(
      std::move(summary_dir), SummaryOptions{.max_file_size = options_.max_file_size});
}

SummaryCollector::~SummaryCollector() {
  try {
    if (session_open_) record_->end_hparams_session(false, last_step_);
  } catch (...) {
  }
  // record_'s destructor writes whatever is queued.
}

bool SummaryCollector::want(const std::optional<bool>& flag) const {
  return flag.value_or(options_.keep_default_action);
}

void SummaryCollector::set_input_images(const Tensor& images) { pending_images_ = images.clone(); }

void SummaryCollector::on_train_begin(nn::RunContext& rc) {
  first_step_ = true;
  last_step_ = rc.cur_step_num;
  if (gradients_ && rc.train_network && !rc.train_network->return_gradients())
    rc.train_network->set_return_gradients(true);
}

bool SummaryCollector::histogram_selected(const std::string& name, int taken) const {
  if (histogram_regex_)
    return std::regex_search(name, *histogram_regex_, std::regex_constants::match_continuous);
  return taken < 5;
}

namespace {

// Float images outside [0, 1] (normalized network inputs) scaled min..max to 0..1 for the PNG.
// Σx² in double (every value, NaN and inf included, as the norm should show them).
double sum_of_squares(const Tensor& t) {
  double lanes[8] = {};
  if (t.dtype() == DType::kFloat32) {
    const float* p = t.data<float>();
    const std::int64_t n = t.numel();
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      for (int j = 0; j < 8; ++j) lanes[j] += static_cast<double>(p[i + j]) * p[i + j];
    }
    for (; i < n; ++i) lanes[0] += static_cast<double>(p[i]) * p[i];
  } else {
    for (double x : t.to_doubles()) lanes[0] += x * x;
  }
  double sq = 0;
  for (double l : lanes) sq += l;
  return sq;
}

Tensor displayable(const Tensor& images) {
  if (!is_floating(images.dtype()) || images.numel() == 0) return images;
  std::vector<double> v = images.to_doubles();
  double lo = INFINITY, hi = -INFINITY;
  for (double x : v)
    if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
  if (!(lo < 0 || hi > 1)) return images;
  const double span = hi > lo ? hi - lo : 1.0;
  for (double& x : v) x = std::isfinite(x) ? (x - lo) / span : 0.0;
  return Tensor::from_doubles(DType::kFloat32, images.shape(), v);
}

}  // namespace

void SummaryCollector::start_lineage(nn::RunContext& rc) {
  std::map<std::string, HParamValue> hp;
  if (rc.network) hp.emplace("model", rc.network->cls_name());
  hp.emplace("batch_size", rc.batch_size);
  hp.emplace("epoch_num", rc.epoch_num);
  hp.emplace("seed", static_cast<double>(random::global_seed()));
  for (const auto& [k, v] : options_.custom_lineage_data) hp.insert_or_assign(k, v);
  std::vector<std::string> metrics{"loss"};
  if (eval_lineage_) metrics.push_back("accuracy");
  record_->add_hparams(hp, metrics, rc.cur_step_num);
  session_open_ = true;
}

void SummaryCollector::on_train_step_end(nn::RunContext& rc) {
  const std::int64_t step = rc.cur_step_num;
  last_step_ = step;
  const bool first = first_step_;
  first_step_ = false;
  if (first && train_lineage_ && !session_open_) start_lineage(rc);
  if (first && graph_ && !graph_done_ && rc.train_network) {
    if (const ir::FuncGraph* g = rc.train_network->step_graph()) {
      record_->add_graph(*g, step);
      graph_done_ = true;
    } else if (const runtime::Executable* exe = rc.train_network->last_executable()) {
      record_->add_graph(*exe, step);
      graph_done_ = true;
    }
  }
  if (!first && step % options_.collect_freq != 0) return;
  if (metric_ && rc.loss.defined() && rc.loss.numel() > 0) {
    const std::vector<double> v = rc.loss.to_doubles();
    record_->add_scalar("loss", std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()),
                        step);
  }
  if (lr_ && rc.train_network) {
    const optim::Optimizer& opt = rc.train_network->optimizer();
    record_->add_scalar("learning_rate", opt.learning_rate_at(opt.global_step() - 1), step);
  } else if (lr_) {
    auto it = options_.custom_lineage_data.find("learning_rate");
    if (it != options_.custom_lineage_data.end())
      if (const double* lr = std::get_if<double>(&it->second.get()))
        record_->add_scalar("learning_rate", *lr, step);
  }
  if (input_ && pending_images_.defined()) {
    record_->add_image("input_data/auto", displayable(pending_images_), step);
    pending_images_ = Tensor();
    input_done_ = true;
  } else if (input_ && !input_done_ && rc.data.defined() && rc.data.numel() > 0) {
    record_->add_image("input_data/auto", displayable(rc.data), step);
    input_done_ = true;
  }
  // Histograms of the selected parameters, then the gradients' histograms and norms: computed
  // here, from the live tensors (no copies), one tensor per task on the thread pool, largest
  // first; the finished events go to the writer thread in the order below.
  struct Job {
    std::string name;
    const Tensor* value;
    bool gradient;
    bool histogram;
    Histogram h;
    double sum_sq = 0;
  };
  std::vector<Job> jobs;
  if (histograms_ && rc.network) {
    int taken = 0;
    for (const auto& [name, p] : rc.network->parameters_and_names()) {
      if (!histogram_selected(name, taken)) {
        if (histogram_regex_) continue;
        break;
      }
      jobs.push_back({.name = name, .value = &p->value, .gradient = false, .histogram = true});
      ++taken;
    }
  }
  if (gradients_ && rc.train_network && rc.train_network->return_gradients()) {
    int taken = 0;
    for (const auto& [name, g] : rc.train_network->gradients()) {
      const bool selected = histogram_selected(name, taken);
      if (selected) ++taken;
      jobs.push_back({.name = name, .value = &g, .gradient = true, .histogram = selected});
    }
  }
  if (jobs.empty()) return;
  std::vector<std::size_t> order(jobs.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return jobs[a].value->numel() > jobs[b].value->numel();
  });
  backend::ThreadPool::global().parallel_for(
      static_cast<std::int64_t>(jobs.size()), 1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
          Job& j = jobs[order[static_cast<std::size_t>(i)]];
          if (j.histogram) {
            j.h = make_histogram(*j.value);
            // The histogram's sum of squares is the norm's, unless NaN / inf were left out.
            if (j.h.skipped == 0) {
              j.sum_sq = j.h.proto.sum_squares();
              continue;
            }
          }
          if (j.gradient) j.sum_sq = sum_of_squares(*j.value);
        }
      });
  auto event = [&](const std::string& tag) {
    tb::Event e;
    e.set_step(step);
    tb::Summary::Value* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    return e;
  };
  double total = 0;
  bool any_gradient = false;
  for (Job& j : jobs) {
    if (j.gradient) {
      any_gradient = true;
      total += j.sum_sq;
    }
    if (!j.histogram) continue;
    tb::Event e = event(j.name + (j.gradient ? "/grad" : "/auto"));
    *e.mutable_summary()->mutable_value(0)->mutable_histo() = std::move(j.h.proto);
    record_->add_event(std::move(e));
    if (j.gradient) {
      tb::Event n = event("gradient_norm/" + j.name);
      n.mutable_summary()->mutable_value(0)->set_simple_value(
          static_cast<float>(std::sqrt(j.sum_sq)));
      record_->add_event(std::move(n));
    }
  }
  if (any_gradient) {
    tb::Event n = event("gradient_norm");
    n.mutable_summary()->mutable_value(0)->set_simple_value(static_cast<float>(std::sqrt(total)));
    record_->add_event(std::move(n));
  }
}

void SummaryCollector::record_metrics(const std::map<std::string, double>& metrics) {
  if (!metric_ && !eval_lineage_) return;
  // An eval "loss" would mix into the training loss curve (and the lineage's "loss" metric).
  for (const auto& [name, value] : metrics)
    record_->add_scalar(name == "loss" ? "eval_loss" : name, value, last_step_);
}

void SummaryCollector::on_train_epoch_end(nn::RunContext& rc) { record_metrics(rc.metrics); }

void SummaryCollector::on_eval_end(nn::RunContext& rc) { record_metrics(rc.metrics); }

void SummaryCollector::on_train_end(nn::RunContext& rc) {
  if (session_open_) {
    record_->end_hparams_session(true, last_step_);
    session_open_ = false;
  }
  record_->flush();
}

}  // namespace loom::summary
