// nn/model.h: Model::train / eval / predict.
#include "nn/model.h"


#include <chrono>
#include <cstring>
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "core/ir/error.h"
#include "core/ir/value.h"
#include "runtime/compiled_function.h"
#include "runtime/executable.h"
#include "nn/context.h"

namespace loom::nn {
namespace {

using Clock = std::chrono::steady_clock;
using ir::Abstract;
using ir::Value;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The mean of a host loss tensor's elements (the loss itself for the usual rank-0 one).
double loss_value(const Tensor& loss) {
  if (loss.numel() == 1) return loss.get(0);
  double sum = 0;
  for (double x : loss.to_doubles()) sum += x;
  return sum / static_cast<double>(loss.numel());
}

// The training flags of a Cell tree, restored on destruction (set_train is recursive, so the
// flags are put back root first, then every descendant in pre-order: each Cell ends with its
// own saved flag even when the tree's flags were mixed).
class TrainingFlagsGuard {
 public:
  explicit TrainingFlagsGuard(Cell& root) : root_(root), root_flag_(root.training()) {
    for (auto& [name, c] : root.cells_and_names()) flags_.emplace_back(c, c->training());
  }
  ~TrainingFlagsGuard() {
    root_.set_train(root_flag_);
    for (auto& [c, flag] : flags_) c->set_train(flag);
  }
  TrainingFlagsGuard(const TrainingFlagsGuard&) = delete;
  TrainingFlagsGuard& operator=(const TrainingFlagsGuard&) = delete;

 private:
  Cell& root_;
  bool root_flag_;
  std::vector<std::pair<Cell*, bool>> flags_;
};

// construct(data, label) = MakeTuple(loss_fn(network(data), label), network(data)), computing
// the network once. The two Cells are used, not registered as children: registering would
// rename (and re-draw) their parameters.
class EvalCell : public Cell {
 public:
  EvalCell(Cell* network, Cell* loss_fn)
      : Cell("EvalCell"), network_(network), loss_fn_(loss_fn) {}
  ops::Var construct(const std::vector<ops::Var>& inputs) override {
    const ops::Var logits = (*network_)(inputs[0]);
    const ops::Var loss = (*loss_fn_)(std::vector<ops::Var>{logits, inputs[1]});
    return current_emitter().make_tuple({loss, logits});
  }

 private:
  Cell* network_;
  Cell* loss_fn_;
};

}  // namespace

// The eval step: the EvalCell and, in graph mode, its graph compiled once per batch signature.
struct Model::EvalCache {
  // What an eval program needs at run time.
  struct Info {
    std::vector<Parameter*> weights;
    bool has_updates = false;
  };

  EvalCache(Cell* network, Cell* loss_fn, const std::string& save_graphs_dir,
            const std::string& passes, const passes::AmpOptions& amp)
      : network(network),
        loss_fn(loss_fn),
        cell(network, loss_fn),
        fn(
            [this, amp](const std::vector<ir::AbstractPtr>& signature,
                   const runtime::CompiledFunction::Dump& dump) {
              Traced t = trace(cell, signature, "eval");
              dump(*t.module, "traced");
              // Mixed precision evaluates as it trains (MindSpore's amp casts the network).
              if (amp.level != passes::AmpLevel::kO0) {
                passes::auto_mixed_precision(*t.graph, amp);
                dump(*t.module, "amp");
              }
              auto info = std::make_shared<Info>();
              info->weights = t.weights;
              // MakeTuple((loss, logits), new values...): the assigned Parameters' new values
              // are donated to them (written back in place).
              std::vector<std::pair<std::size_t, std::size_t>> donate;
              for (std::size_t i = 0; i < t.updates.size(); ++i) {
                const auto w = std::find(t.weights.begin(), t.weights.end(), t.updates[i]);
                donate.emplace_back(2 + i, 2 + static_cast<std::size_t>(w - t.weights.begin()));
              }
              info->has_updates = !t.updates.empty();
              return runtime::Program(std::move(t.module), t.graph, std::move(donate),
                                      std::move(info));
            },
            runtime::FunctionOptions{.name = "eval",
                                     .purpose = passes::Purpose::kEval,
                                     .passes = passes,
                                     .backend = &context_backend(),
                                     .save_graphs_dir = save_graphs_dir}) {}

  // (loss, logits) of one batch, in host memory. The batch is copied to the evaluation's device
  // and the Parameters moved there (once: they stay).
  std::pair<Tensor, Tensor> run(const Tensor& data, const Tensor& label) {
    Value out;
    if (context_mode() == ExecMode::kPyNative) {
      backend::Backend& b = context_backend();
      network->to_device(b);
      loss_fn->to_device(b);
      out = cell(std::vector<ops::Var>{ops::Var(Value::tensor(backend::to_device(data, b))),
                                       ops::Var(Value::tensor(backend::to_device(label, b)))})
                .value();
    } else {
      runtime::CompiledFunction::Entry& e =
          fn.entry({Abstract::tensor(data.dtype(), data.shape()),
                    Abstract::tensor(label.dtype(), label.shape())});
      const Info& info = e.program.info_as<Info>();
      backend::Backend& b = fn.options().backend ? *fn.options().backend : backend::cpu_backend();
      const std::vector<Tensor> batch = batches(b, std::vector<Tensor>{data, label});
      std::vector<Value> args{Value::tensor(batch[0]), Value::tensor(batch[1])};
      for (Parameter* p : info.weights) {
        to_device(*p, b);
        args.push_back(Value::tensor(p->value));
      }
      out = fn.run(e, std::move(args));
      if (info.has_updates) out = out.elements()[0];
    }
    return {backend::to_host(out.elements()[0].as_tensor()),
            backend::to_host(out.elements()[1].as_tensor())};
  }

  Cell* network;
  Cell* loss_fn;
  EvalCell cell;
  runtime::CompiledFunction fn;
  backend::BatchMover batches;  // graph mode's batch copies to the device
};

Model::Model(std::shared_ptr<Cell> network, std::shared_ptr<Cell> loss_fn,
             std::shared_ptr<optim::Optimizer> optimizer,
             std::map<std::string, std::shared_ptr<Metric>> metrics, int)
    : network_(std::move(network)),
      loss_fn_(std::move(loss_fn)),
      optimizer_(std::move(optimizer)),
      metrics_(std::move(metrics)) {
  if (!network_) throw ValueError("Model: expected a network, got null");
  if (!loss_fn_) throw ValueError("Model: expected a loss function, got null");
  if (!optimizer_) throw ValueError("Model: expected an optimizer, got null");
  for (const auto& [name, metric] : metrics_) {
    if (!metric) throw ValueError("Model: expected a metric for '" + name + "', got null");
  }
}

Model::Model(std::shared_ptr<Cell> network, std::shared_ptr<Cell> loss_fn,
             const OptimizerSpec& spec, std::map<std::string, std::shared_ptr<Metric>> metrics)
    : Model(std::move(network), std::move(loss_fn), optim::make_optimizer(spec),
            std::move(metrics), 0) {}

double Model::reduce_mean(double sum, double count) {
  if (reducer_) {
    std::vector<double> v{sum, count};
    reducer_(v);
    sum = v[0];
    count = v[1];
  }
  return count > 0 ? sum / count : 0.0;
}

void Model::fit(std::int64_t epochs, const data::DatasetPtr& train_dataset,
                const data::DatasetPtr& valid_dataset, const std::vector<Callback*>& callbacks,
                const TrainOptions& options) {
  if (!valid_dataset) throw ValueError("Model.fit: expected a validation dataset, got null");
  if (metrics_.empty()) {
    throw ValueError("Model.fit: expected at least one metric (pass metrics to the Model), "
                     "got none");
  }
  if (options.valid_frequency < 1) {
    throw ValueError("Model.fit: expected valid_frequency >= 1, got " +
                     std::to_string(options.valid_frequency));
  }
  train_impl(epochs, train_dataset, valid_dataset, callbacks, options);
}

void Model::train(std::int64_t epochs, const data::DatasetPtr& dataset,
                  const std::vector<Callback*>& callbacks, const TrainOptions& options) {
  train_impl(epochs, dataset, nullptr, callbacks, options);
}

void Model::train_impl(std::int64_t epochs, const data::DatasetPtr& dataset,
                       const data::DatasetPtr& valid, const std::vector<Callback*>& callbacks,
                       const TrainOptions& options) {
  const Clock::time_point t_begin = Clock::now();
  if (!dataset) throw ValueError("Model.train: expected a dataset, got null");
  const std::int64_t initial = options.initial_epoch;
  if (epochs < 0 || initial < 0 || initial > epochs) {
    throw ValueError("Model.train: expected 0 <= initial_epoch <= epochs, got initial_epoch " +
                     std::to_string(initial) + " and epochs " + std::to_string(epochs));
  }
  const data::Position& start = options.start;
  if ((start.epoch != 0 || start.index != 0) && start.epoch != initial) {
    throw ValueError("Model.train: expected the start position's epoch to equal initial_epoch (" +
                     std::to_string(initial) + "), got " + std::to_string(start.epoch));
  }
  for (Callback* cb : callbacks) {
    if (cb == nullptr) throw ValueError("Model.train: expected callbacks, got a null pointer");
  }

  // One iterator over every remaining epoch (prefetching across epoch boundaries); it reads
  // epoch e's rows as the stages' pure get(e, i), so a resumed run sees exactly the rows an
  // uninterrupted one would. Made first: it checks the start position.
  std::optional<data::Iterator> it;
  it.emplace(dataset, data::IteratorOptions{.num_epochs = epochs,
                                            .num_workers = options.data_workers,
                                            .prefetch = options.prefetch,
                                            .start = {initial, start.index}});
  const std::int64_t n = it->rows_per_epoch();

  TrainOneStepCell& step_cell = build_train_network();
  step_cell.network().set_train(true);  // the network and the loss, recursively

  stats_ = TrainStats{};
  const double compile_before = step_cell.compile_seconds();

  RunContext rc;
  rc.epoch_num = epochs;
  rc.batch_num = n;
  rc.cur_epoch_num = initial;
  rc.cur_step_num = initial * n + start.index;
  rc.step_in_epoch = start.index;
  rc.network = network_.get();
  rc.train_network = &step_cell;

  for (Callback* cb : callbacks) cb->on_train_begin(rc);
  for (std::int64_t epoch = initial; epoch < epochs && !rc.stop_requested; ++epoch) {
    const std::int64_t first = epoch == initial ? start.index : 0;
    rc.cur_epoch_num = epoch + 1;
    rc.step_in_epoch = first;
    rc.epoch_loss_mean = 0;
    rc.epoch_loss_steps = 0;
    rc.epoch_loss_first_step = first + 1;
    double loss_sum = 0;
    std::int64_t loss_steps = 0;
    // A device's losses are read back kPendingLosses at a time (and at the epoch's end), not at
    // every step: a read waits for the device, and without it the host queues step n + 1 while
    // the device still runs step n.
    constexpr std::size_t kPendingLosses = 64;
    std::vector<Tensor> pending;
    auto read_pending = [&] {
      for (const Tensor& l : pending) {
        loss_sum += loss_value(backend::to_host(l));
        ++loss_steps;
      }
      pending.clear();
      if (loss_steps > 0) rc.epoch_loss_mean = loss_sum / static_cast<double>(loss_steps);
      rc.epoch_loss_steps = loss_steps;
    };
    double device_wait_seconds = 0;  // data waits of the steps whose loss stayed on a device
    bool on_device = false;
    for (Callback* cb : callbacks) cb->on_train_epoch_begin(rc);

    const Clock::time_point t_loop = Clock::now();
    for (std::int64_t i = first; i < n; ++i) {
      const Clock::time_point t_wait = Clock::now();
      std::optional<data::Row> row = it->next();
      const double wait = seconds_since(t_wait);
      if (!row) {
        throw InternalError("Model.train: the data iterator ended early, at epoch " +
                            std::to_string(epoch) + " row " + std::to_string(i));
      }
      if (row->size() < 2) {
        throw ValueError("Model.train: expected rows (data, label) from " + dataset->describe() +
                         ", got " + std::to_string(row->size()) + " column(s)");
      }
      const Tensor& x = (*row)[0];
      ++rc.cur_step_num;
      rc.step_in_epoch = i + 1;
      rc.batch_size = x.rank() >= 1 ? x.dim(0) : 1;
      rc.data = x;
      rc.data_wait_seconds = wait;
      for (Callback* cb : callbacks) cb->on_train_step_begin(rc);

      const Clock::time_point t_step = Clock::now();
      rc.loss = step_cell.step(x, (*row)[1]);  // on the step's device
      rc.step_seconds = seconds_since(t_step);

      ++stats_.steps;
      stats_.samples += rc.batch_size;
      stats_.data_wait_seconds += wait;
      if (rc.loss.is_host()) {
        stats_.step_seconds += rc.step_seconds;
        loss_sum += loss_value(rc.loss);
        ++loss_steps;
        rc.epoch_loss_mean = loss_sum / static_cast<double>(loss_steps);  // running, so far
        rc.epoch_loss_steps = loss_steps;
      } else {
        // A device step's time is its share of the loop (below): the host only queued it.
        on_device = true;
        device_wait_seconds += wait;
        pending.push_back(rc.loss);
        if (pending.size() >= kPendingLosses) read_pending();
      }
      for (Callback* cb : callbacks) cb->on_train_step_end(rc);
      if (rc.stop_requested) break;
    }
    read_pending();  // waits for the device's last step
    const double loop_seconds = seconds_since(t_loop);
    stats_.loop_seconds += loop_seconds;
    if (on_device) stats_.step_seconds += std::max(0.0, loop_seconds - device_wait_seconds);
    // The epoch's mean loss over every rank's steps of it.
    rc.epoch_loss_mean = reduce_mean(loss_sum, static_cast<double>(loss_steps));
    stats_.epoch_loss_mean = rc.epoch_loss_mean;
    stats_.epoch_loss_first_step = rc.epoch_loss_first_step;
    const bool last = epoch + 1 == epochs || rc.stop_requested;
    if (valid && ((epoch + 1) % options.valid_frequency == 0 || last)) {
      const Clock::time_point t_eval = Clock::now();
      stats_.metrics = eval(valid);
      stats_.eval_seconds += seconds_since(t_eval);
      for (const auto& [k, v] : stats_.metrics) rc.metrics[k] = v;
      step_cell.network().set_train(true);
    }
    for (Callback* cb : callbacks) cb->on_train_epoch_end(rc);
  }
  it.reset();  // stops the prefetching workers
  stats_.compile_seconds = step_cell.compile_seconds() - compile_before;
  stats_.total_seconds = seconds_since(t_begin);
  for (Callback* cb : callbacks) cb->on_train_end(rc);
}

TrainOneStepCell& Model::build_train_network() {
  if (!train_) {
    auto with_loss = std::make_shared<WithLossCell>(network_, loss_fn_);
    train_ = std::make_unique<TrainOneStepCell>(std::move(with_loss), optimizer_);
    runtime::CompiledFunction& fn = train_->compiled_function();
    if (!passes_.empty()) fn.set_passes(passes_);
    if (!save_graphs_dir_.empty()) fn.set_save_graphs_dir(save_graphs_dir_);
    train_->set_amp(amp_);
    for (const auto& o : observers_) fn.add_observer(o);
    fn.share_arena(arena_);
  }
  return *train_;
}

std::map<std::string, double> Model::eval(const data::DatasetPtr& dataset,
                                          const std::vector<Callback*>& callbacks) {
  if (!dataset) throw ValueError("Model.eval: expected a dataset, got null");
  if (metrics_.empty()) {
    throw ValueError("Model.eval: expected at least one metric (pass metrics to the Model), "
                     "got none");
  }
  for (Callback* cb : callbacks) {
    if (cb == nullptr) throw ValueError("Model.eval: expected callbacks, got a null pointer");
  }
  TrainingFlagsGuard restore(*network_);
  network_->set_train(false);
  runtime::CompiledFunction& fn = eval_function();
  (void)fn;

  for (auto& [name, metric] : metrics_) metric->clear();
  data::Iterator it(dataset, {.num_epochs = 1});
  RunContext rc;
  rc.epoch_num = 1;
  rc.cur_epoch_num = 1;
  rc.batch_num = it.rows_per_epoch();
  rc.network = network_.get();
  rc.train_network = train_.get();
  for (Callback* cb : callbacks) cb->on_eval_begin(rc);
  while (std::optional<data::Row> row = it.next()) {
    if (row->size() < 2) {
      throw ValueError("Model.eval: expected rows (data, label) from " + dataset->describe() +
                       ", got " + std::to_string(row->size()) + " column(s)");
    }
    auto [loss, logits] = eval_cache_->run((*row)[0], (*row)[1]);
    ++rc.cur_step_num;
    ++rc.step_in_epoch;
    rc.batch_size = (*row)[0].rank() >= 1 ? (*row)[0].dim(0) : 1;
    rc.loss = loss;
    const MetricInputs in{.loss = loss, .logits = logits, .label = (*row)[1]};
    for (auto& [name, metric] : metrics_) metric->update(in);
  }
  if (reducer_) {  // every rank's sums added: each rank gets the whole dataset's metrics
    for (auto& [name, metric] : metrics_) {
      std::vector<double> sums = metric->sums();
      reducer_(sums);
      metric->set_sums(sums);
    }
  }
  std::map<std::string, double> results;
  for (const auto& [name, metric] : metrics_) results[name] = metric->eval();
  rc.metrics = results;
  for (Callback* cb : callbacks) cb->on_eval_end(rc);
  return results;
}

runtime::CompiledFunction& Model::eval_function() {
  if (!eval_cache_) {
    eval_cache_ = std::make_shared<EvalCache>(network_.get(), loss_fn_.get(), save_graphs_dir_,
                                              passes_, amp_);
    for (const auto& o : observers_) eval_cache_->fn.add_observer(o);
    eval_cache_->fn.share_arena(arena_);
  }
  return eval_cache_->fn;
}

void Model::add_observer(std::shared_ptr<runtime::Observer> observer) {
  if (!observer) throw ValueError("Model.add_observer: expected an observer, got null");
  observers_.push_back(observer);
  if (train_) train_->add_observer(observer);
  if (eval_cache_) eval_cache_->fn.add_observer(observer);
}

void Model::remove_observer(const runtime::Observer* observer) {
  std::erase_if(observers_, [&](const auto& o) { return o.get() == observer; });
  if (train_) train_->remove_observer(observer);
  if (eval_cache_) eval_cache_->fn.remove_observer(observer);
}

void Model::set_save_graphs_dir(const std::string& dir) {
  save_graphs_dir_ = dir;
  if (train_) train_->compiled_function().set_save_graphs_dir(dir);
  if (eval_cache_) eval_cache_->fn.set_save_graphs_dir(dir);
}

void Model::set_amp(const passes::AmpOptions& amp) {
  if (train_ || eval_cache_) {
    throw ValueError("Model.set_amp: set it before the first training step or evaluation");
  }
  if (amp.dtype != DType::kFloat16 && amp.dtype != DType::kBFloat16) {
    throw ValueError("Model.set_amp: expected the low precision dtype Float16 or BFloat16, got " +
                     std::string(dtype_name(amp.dtype)));
  }
  amp_ = amp;
}

void Model::set_passes(const std::string& pipeline) {
  passes_ = pipeline;
  if (train_) train_->compiled_function().set_passes(pipeline);
  if (eval_cache_) eval_cache_->fn.set_passes(pipeline);
}

Tensor Model::predict(const Tensor& x) {
  TrainingFlagsGuard restore(*network_);
  network_->set_train(false);
  const ops::Var y = (*network_)(ops::Var(Value::tensor(x)));
  if (!y.is_value() || !y.value().is_tensor()) {
    throw ValueError("Model.predict: expected the network to return a tensor");
  }
  return backend::to_host(y.value().as_tensor());
}

}  // namespace loom::nn
