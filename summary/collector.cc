#include "summary/collector.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/random/random.h"
#include "backends/backend.h"
#include "backends/thread_pool.h"
#include "core/ir/error.h"
#include "nn/cell.h"
#include "nn/train.h"
#include "summary/distributions.h"
#include "summary/idle_worker.h"

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
    if (idle_) idle_->finish_all();  // before record_ writes the events waiting for them
  } catch (...) {
  }
  try {
    if (session_open_) record_->end_hparams_session(false, last_step_);
  } catch (...) {
  }
  // record_'s destructor writes whatever is queued.
}

bool SummaryCollector::want(const std::optional<bool>& flag) const {
  return flag.value_or(options_.keep_default_action);
}

void SummaryCollector::set_input_images(const Tensor& images) {
  pending_images_ = images.is_host() ? images.clone() : backend::to_host(images);
}

void SummaryCollector::on_train_begin(nn::RunContext& rc) {
  first_step_ = true;
  selection_.reset();  // the parameters are looked up again at the first collected step
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

namespace {

// The on/off collections, by name; "histogram" (histogram_regular) is handled apart.
struct NamedSwitch {
  const char* name;
  std::optional<bool> CollectSpecifiedData::*field;
  bool on_by_default;  // with keep_default_action
};
constexpr NamedSwitch kSwitches[] = {
    {"metric", &CollectSpecifiedData::collect_metric, true},
    {"learning_rate", &CollectSpecifiedData::collect_learning_rate, true},
    {"graph", &CollectSpecifiedData::collect_graph, true},
    {"input_data", &CollectSpecifiedData::collect_input_data, true},
    {"train_lineage", &CollectSpecifiedData::collect_train_lineage, true},
    {"eval_lineage", &CollectSpecifiedData::collect_eval_lineage, true},
    {"gradients", &CollectSpecifiedData::collect_gradients, false},
};

}  // namespace

const std::vector<std::string>& collection_names() {
  static const std::vector<std::string> names = {
      "metric", "learning_rate", "graph", "input_data", "histogram", "train_lineage",
      "eval_lineage", "gradients"};
  return names;
}

void select_collection(SummaryCollectorOptions& options, const std::string& item) {
  const bool on = !item.empty() && item[0] == '+';
  const std::string name = item.empty() ? "" : item.substr(1);
  CollectSpecifiedData& c = options.collect_specified_data;
  if (!item.empty() && (item[0] == '+' || item[0] == '-')) {
    for (const NamedSwitch& s : kSwitches) {
      if (name == s.name) {
        c.*s.field = on;
        return;
      }
    }
    if (name == "histogram") {
      if (on && c.histogram_regular) return;
      for (const NamedSwitch& s : kSwitches) {
        if (!(c.*s.field)) c.*s.field = s.on_by_default && options.keep_default_action;
      }
      c.histogram_regular.reset();
      options.keep_default_action = on;
      return;
    }
  }
  std::string names;
  for (const std::string& n : collection_names()) names += (names.empty() ? "" : ", ") + n;
  throw ValueError("expected +NAME or -NAME with NAME one of " + names + ", got '" + item + "'");
}

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
  // The histograms and norms are handed to the idle thread right after the step; their events
  // go after the scalars and the image.
  std::shared_ptr<PendingDistributions> distributions = post_distributions(rc, step);
  if (metric_ && rc.loss.defined() && rc.loss.numel() > 0) {
    const std::vector<double> v = backend::to_host(rc.loss).to_doubles();
    record_->add_scalar("loss", std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()),
                        step);
    // Loss scaling (nn/train.h): the scale after this step and the steps skipped so far.
    if (rc.train_network &&
        rc.train_network->loss_scale_manager().enabled()) {
      record_->add_scalar("loss_scale", rc.train_network->loss_scale(), step);
      record_->add_scalar("skipped_steps", static_cast<double>(rc.train_network->skipped_steps()),
                          step);
    }
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
    record_->add_image("input_data/auto", displayable(backend::to_host(rc.data)), step);
    input_done_ = true;
  }
  if (distributions) {
    record_->add_deferred([distributions] {
      distributions->job->wait();
      return std::move(distributions->events);
    });
  }
}

void SummaryCollector::select_distributions(nn::RunContext& rc) {
  selected_for_ = rc.network;
  auto sel = std::make_shared<DistributionSelection>();
  if (histograms_ && rc.network) {
    int taken = 0;
    for (const auto& [name, p] : rc.network->parameters_and_names()) {
      if (!histogram_selected(name, taken)) {
        if (histogram_regex_) continue;
        break;
      }
      sel->param_tags.push_back(name + "/auto");
      sel->params.push_back(&p->value);
      ++taken;
    }
  }
  if (gradients_ && rc.train_network) {
    int taken = 0;
    for (const auto& entry : rc.train_network->gradients()) {
      const bool selected = histogram_selected(entry.first, taken);
      if (selected) ++taken;
      sel->gradient_names.push_back(entry.first);
      sel->gradient_histogram.push_back(selected);
    }
  }
  selection_ = std::move(sel);
}

std::shared_ptr<SummaryCollector::PendingDistributions> SummaryCollector::post_distributions(
    nn::RunContext& rc, std::int64_t step) {
  const std::vector<std::pair<std::string, Tensor>>* gradients = nullptr;
  if (gradients_ && rc.train_network && rc.train_network->return_gradients())
    gradients = &rc.train_network->gradients();
  if (!selection_ || rc.network != selected_for_ ||
      (gradients && gradients->size() != selection_->gradient_names.size()))
    select_distributions(rc);
  if (selection_->params.empty() && (!gradients || gradients->empty())) return nullptr;
  auto pending = std::make_shared<PendingDistributions>();
  {
    std::lock_guard<std::mutex> lock(spare_mu_);
    if (!spare_.empty()) {
      pending->values = std::move(spare_.back());
      spare_.pop_back();
    }
  }
  if (!pending->values) pending->values = std::make_unique<StepValues>();
  pending->values->take(selection_, step, gradients);
  if (!idle_) idle_ = std::make_unique<IdleWorker>();
  pending->job = idle_->post([this, p = pending.get()](bool on_idle_thread) {
    // On the idle thread alone; the training thread (catching up, or at the end) uses the pool.
    p->events = compute_distributions(*p->values, !on_idle_thread);
    p->values->gradients.clear();  // the step's tensors are not held longer than needed
    std::lock_guard<std::mutex> lock(spare_mu_);
    spare_.push_back(std::move(p->values));
  });
  // A bounded backlog: when the idle thread falls behind (no idle core), the training thread
  // does the oldest jobs itself.
  idle_->run_oldest(kMaxPendingSteps);
  return pending;
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
  if (idle_) idle_->finish_all();
  if (session_open_) {
    record_->end_hparams_session(true, last_step_);
    session_open_ = false;
  }
  record_->flush();
}

}  // namespace loom::summary
