// Training from Python with MindSpore's vocabulary: losses, WithLossCell, the optimizers (given
// the parameters they update), TrainOneStepCell, Model with metrics and callbacks (Python
// callbacks run at MindSpore's hook points), and the data pipeline (NumPy slices, the MNIST and
// CIFAR-10 readers, map / batch / shuffle and the vision transforms). Steps run without the GIL;
// Ctrl-C stops training after the current step and raises KeyboardInterrupt.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/train_state.h"
#include "core/ir/error.h"
#include "data/dataset.h"
#include "debug/dump.h"
#include "debug/numerics.h"
#include "debug/profiler.h"
#include "debug/watch.h"
#include "nn/context.h"
#include "nn/callback.h"
#include "nn/cell.h"
#include "nn/loss.h"
#include "nn/metrics.h"
#include "nn/model.h"
#include "nn/train.h"
#include "optim/optimizer.h"
#include "python/src/bindings.h"
#include "summary/collector.h"
#include "runtime/compiled_function.h"

namespace loom::python {

namespace {

// The parameters an optimizer was given, as one group by full name (MindSpore's optimizers
// update exactly the parameters they are given).
std::vector<optim::ParamGroup> groups_of(const py::object& params) {
  if (params.is_none()) return {};
  optim::ParamGroup g;
  for (const py::handle& p : params) {
    if (!py::isinstance<ParamRef>(p)) {
      throw TypeError("optimizer: expected the parameters to update (net.trainable_params()), "
                      "got a " + std::string(py::str(py::type::of(p).attr("__name__"))));
    }
    g.params.push_back(p.cast<ParamRef&>().param->name);
  }
  if (g.params.empty()) throw ValueError("optimizer: expected at least one parameter, got none");
  return {g};
}

// A learning rate: a number or a list of per-step values.
optim::LearningRate learning_rate_of(const py::object& lr) {
  if (py::isinstance<py::float_>(lr) || py::isinstance<py::int_>(lr)) {
    return optim::LearningRate(lr.cast<double>());
  }
  return optim::LearningRate(lr.cast<std::vector<double>>());
}

// What a Python callback sees: MindSpore's run_context / cb_params in one object.
struct PyRunContext {
  nn::RunContext* rc;
};

// Ctrl-C: Python sees the signal only when it runs; after each step this callback lets it check
// and, on KeyboardInterrupt, stops training cleanly (the step done, the callbacks' ends run).
class InterruptCheck : public nn::Callback {
 public:
  void on_train_step_end(nn::RunContext& rc) override {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) stop(rc, py::error_already_set());
  }
  void stop(nn::RunContext& rc, py::error_already_set e) {
    if (!interrupted) interrupted = std::move(e);
    rc.request_stop();
  }
  std::optional<py::error_already_set> interrupted;
};

// A Python callback at MindSpore's hook points (each method optional). A KeyboardInterrupt
// raised inside one (Ctrl-C while Python code runs) stops training as InterruptCheck does.
class PyCallback : public nn::Callback {
 public:
  PyCallback(py::object obj, InterruptCheck& interrupts)
      : obj_(std::move(obj)), interrupts_(interrupts) {}
  void on_train_begin(nn::RunContext& rc) override { call("on_train_begin", rc); }
  void on_train_epoch_begin(nn::RunContext& rc) override { call("on_train_epoch_begin", rc); }
  void on_train_step_begin(nn::RunContext& rc) override { call("on_train_step_begin", rc); }
  void on_train_step_end(nn::RunContext& rc) override { call("on_train_step_end", rc); }
  void on_train_epoch_end(nn::RunContext& rc) override { call("on_train_epoch_end", rc); }
  void on_train_end(nn::RunContext& rc) override { call("on_train_end", rc); }

 private:
  void call(const char* hook, nn::RunContext& rc) {
    py::gil_scoped_acquire gil;
    if (!py::hasattr(obj_, hook)) return;
    try {
      obj_.attr(hook)(PyRunContext{&rc});
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_KeyboardInterrupt)) throw;
      interrupts_.stop(rc, std::move(e));
    }
  }
  py::object obj_;
  InterruptCheck& interrupts_;
};

// MindSpore's GeneratorDataset over a random-access Python source (len() and [i]: a row is a
// tuple of arrays, one per column; a single array is a one-column row). Rows are read on demand,
// under the GIL, by whichever thread asks (the prefetching iterator's). An iterable without
// indexing is read into a list once, when the dataset is made.
class PyDataset final : public data::Dataset {
 public:
  PyDataset(py::object source, std::vector<std::string> columns)
      : source_(std::move(source)), columns_(std::move(columns)) {
    if (!py::hasattr(source_, "__getitem__") || !py::hasattr(source_, "__len__")) {
      source_ = py::list(source_);  // a generator or other iterable: its rows, once
    }
    size_ = static_cast<std::int64_t>(py::len(source_));
    if (columns_.empty()) throw ValueError("GeneratorDataset: expected column_names, got none");
  }
  ~PyDataset() override {
    py::gil_scoped_acquire gil;
    source_ = py::object();
  }
  std::int64_t size() const override { return size_; }
  data::Row get(std::int64_t epoch, std::int64_t i) const override {
    if (i < 0 || i >= size_) {
      throw ValueError("GeneratorDataset: expected a row in [0, " + std::to_string(size_) +
                       "), got " + std::to_string(i));
    }
    py::gil_scoped_acquire gil;
    py::object row = source_[py::int_(i)];
    if (!py::isinstance<py::tuple>(row) && !py::isinstance<py::list>(row)) {
      row = py::make_tuple(row);
    }
    if (py::len(row) != columns_.size()) {
      throw ValueError("GeneratorDataset: expected rows of " + std::to_string(columns_.size()) +
                       " columns (column_names), got " + std::to_string(py::len(row)) +
                       " at row " + std::to_string(i));
    }
    data::Row out;
    for (const py::handle& v : row) {
      out.push_back(py::module_::import("loom._loom").attr("Tensor")(v).cast<Tensor>());
    }
    return out;
  }
  std::vector<std::string> column_names() const override { return columns_; }
  std::string describe() const override { return "GeneratorDataset"; }

 private:
  py::object source_;
  std::vector<std::string> columns_;
  std::int64_t size_ = 0;
};

// Adam and AdamWeightDecay: the same arguments (MindSpore's), their own eps default.
template <class O>
void bind_adam(py::module_& m, const char* name, double eps_default) {
  py::class_<O, optim::Optimizer, std::shared_ptr<O>>(m, name)
      .def(py::init([](const py::object& params, const py::object& lr, double beta1, double beta2,
                       double eps, double weight_decay) {
             typename O::Options o;
             o.learning_rate = learning_rate_of(lr);
             o.beta1 = beta1;
             o.beta2 = beta2;
             o.eps = eps;
             o.weight_decay = weight_decay;
             o.groups = groups_of(params);
             return std::make_shared<O>(std::move(o));
           }),
           py::arg("params"), py::arg("learning_rate") = 1e-3, py::arg("beta1") = 0.9,
           py::arg("beta2") = 0.999, py::arg("eps") = eps_default,
           py::arg("weight_decay") = 0.0);
}

std::map<std::string, std::shared_ptr<nn::Metric>> metrics_of(const py::object& metrics) {
  std::map<std::string, std::shared_ptr<nn::Metric>> out;
  if (metrics.is_none()) return out;
  for (const py::handle& m : metrics) {
    const std::string name = py::str(m);
    if (name == "accuracy" || name == "acc") {
      out[name] = std::make_shared<nn::Accuracy>();
    } else if (name == "loss") {
      out[name] = std::make_shared<nn::Loss>();
    } else {
      throw ValueError("Model: expected metrics among 'accuracy', 'acc' and 'loss', got '" +
                       name + "'");
    }
  }
  return out;
}

void run_training(nn::Model& model, std::int64_t epochs, const data::DatasetPtr& dataset,
                  const py::object& callbacks) {
  std::vector<std::unique_ptr<nn::Callback>> owned;
  std::vector<nn::Callback*> cbs;
  std::vector<std::shared_ptr<runtime::Observer>> observers;  // for this train() only
  auto check = std::make_unique<InterruptCheck>();
  if (!callbacks.is_none()) {
    py::object list = py::isinstance<py::list>(callbacks) || py::isinstance<py::tuple>(callbacks)
                          ? callbacks
                          : py::object(py::make_tuple(callbacks));
    // The profiler and the debugger's tools see the compiled step's launches too: observers of
    // the Model for this train().
    auto observer = [&](auto tool) {
      model.add_observer(tool);
      observers.push_back(tool);
      cbs.push_back(tool.get());
    };
    for (const py::handle& c : list) {
      if (py::isinstance<debug::Profiler>(c)) {
        observer(c.cast<std::shared_ptr<debug::Profiler>>());
      } else if (py::isinstance<debug::NumericsChecker>(c)) {
        observer(c.cast<std::shared_ptr<debug::NumericsChecker>>());
      } else if (py::isinstance<debug::Dumper>(c)) {
        observer(c.cast<std::shared_ptr<debug::Dumper>>());
      } else if (py::isinstance<debug::Watcher>(c)) {
        observer(c.cast<std::shared_ptr<debug::Watcher>>());
      } else if (py::isinstance<nn::Callback>(c)) {
        cbs.push_back(c.cast<nn::Callback*>());
      } else {
        owned.push_back(
            std::make_unique<PyCallback>(py::reinterpret_borrow<py::object>(c), *check));
        cbs.push_back(owned.back().get());
      }
    }
  }
  cbs.push_back(check.get());
  struct Detach {  // the tools stop observing when train() ends, however it ends
    nn::Model& model;
    std::vector<std::shared_ptr<runtime::Observer>>& observers;
    ~Detach() {
      for (const auto& o : observers) model.remove_observer(o.get());
    }
  } detach{model, observers};
  {
    py::gil_scoped_release release;
    model.train(epochs, dataset, cbs);
  }
  if (check->interrupted) throw *check->interrupted;
}

}  // namespace

void init_train(py::module_& m) {
  // ---- losses and wrappers ----
  py::class_<nn::SoftmaxCrossEntropyWithLogits, nn::Cell,
             std::shared_ptr<nn::SoftmaxCrossEntropyWithLogits>>(m, "SoftmaxCrossEntropyWithLogits")
      .def(py::init<bool, std::string>(), py::arg("sparse") = false,
           py::arg("reduction") = "mean");
  py::class_<nn::MSELoss, nn::Cell, std::shared_ptr<nn::MSELoss>>(m, "MSELoss")
      .def(py::init<std::string>(), py::arg("reduction") = "mean");
  py::class_<nn::L1Loss, nn::Cell, std::shared_ptr<nn::L1Loss>>(m, "L1Loss")
      .def(py::init<std::string>(), py::arg("reduction") = "mean");
  py::class_<nn::WithLossCell, nn::Cell, std::shared_ptr<nn::WithLossCell>>(m, "WithLossCell")
      .def(py::init<std::shared_ptr<nn::Cell>, std::shared_ptr<nn::Cell>>(), py::arg("backbone"),
           py::arg("loss_fn"));

  // ---- optimizers ----
  py::class_<optim::Optimizer, std::shared_ptr<optim::Optimizer>>(m, "Optimizer")
      .def("__repr__", &optim::Optimizer::describe)
      .def_property_readonly("global_step", &optim::Optimizer::global_step);
  py::class_<optim::Momentum, optim::Optimizer, std::shared_ptr<optim::Momentum>>(m, "Momentum")
      .def(py::init([](const py::object& params, const py::object& lr, double momentum,
                       double weight_decay, bool use_nesterov) {
             return std::make_shared<optim::Momentum>(
                 optim::Momentum::Options{.learning_rate = learning_rate_of(lr),
                                          .momentum = momentum,
                                          .weight_decay = weight_decay,
                                          .use_nesterov = use_nesterov,
                                          .groups = groups_of(params)});
           }),
           py::arg("params"), py::arg("learning_rate") = 0.1, py::arg("momentum") = 0.9,
           py::arg("weight_decay") = 0.0, py::arg("use_nesterov") = false);
  py::class_<optim::SGD, optim::Optimizer, std::shared_ptr<optim::SGD>>(m, "SGD")
      .def(py::init([](const py::object& params, const py::object& lr, double momentum,
                       double dampening, double weight_decay, bool nesterov) {
             return std::make_shared<optim::SGD>(
                 optim::SGD::Options{.learning_rate = learning_rate_of(lr),
                                     .momentum = momentum,
                                     .dampening = dampening,
                                     .weight_decay = weight_decay,
                                     .nesterov = nesterov,
                                     .groups = groups_of(params)});
           }),
           py::arg("params"), py::arg("learning_rate") = 0.1, py::arg("momentum") = 0.0,
           py::arg("dampening") = 0.0, py::arg("weight_decay") = 0.0,
           py::arg("nesterov") = false);
  bind_adam<optim::Adam>(m, "Adam", 1e-8);
  bind_adam<optim::AdamWeightDecay>(m, "AdamWeightDecay", 1e-6);

  // ---- loss scaling (nn::LossScale; loom.amp's managers make one) ----
  py::class_<nn::LossScale>(m, "LossScale")
      .def_static("fixed", &nn::LossScale::fixed, py::arg("loss_scale") = 128.0,
                  py::arg("drop_overflow_update") = true)
      .def_static("dynamic", &nn::LossScale::dynamic, py::arg("init_loss_scale") = 16777216.0,
                  py::arg("scale_factor") = 2.0, py::arg("scale_window") = 2000)
      .def_readonly("scale", &nn::LossScale::scale)
      .def_readonly("drop_overflow_update", &nn::LossScale::drop_overflow_update)
      .def("__repr__", &nn::LossScale::describe);

  // ---- one training step ----
  py::class_<nn::TrainOneStepCell, std::shared_ptr<nn::TrainOneStepCell>>(m, "TrainOneStepCell")
      .def(py::init([](std::shared_ptr<nn::Cell> network,
                       std::shared_ptr<optim::Optimizer> optimizer) {
             return std::make_shared<nn::TrainOneStepCell>(std::move(network), optimizer);
           }),
           py::arg("network"), py::arg("optimizer"))
      .def(
          "__call__",
          [](nn::TrainOneStepCell& s, const py::object& data, const py::object& label) {
            const Tensor x = to_var(data).value().as_tensor();
            const Tensor y = to_var(label).value().as_tensor();
            Tensor loss;
            {
              py::gil_scoped_release release;
              loss = s.step(x, y);
            }
            return loss;
          },
          py::arg("data"), py::arg("label"), "One step: the loss before the update")
      .def("_set_save_graphs_dir",
           [](nn::TrainOneStepCell& s, const std::string& dir) {
             s.compiled_function().set_save_graphs_dir(dir);
           })
      .def_property_readonly("num_steps", &nn::TrainOneStepCell::num_steps)
      .def_property_readonly("num_compilations", &nn::TrainOneStepCell::num_compilations);

  // ---- callbacks ----
  py::class_<nn::Callback>(m, "_NativeCallback");
  py::class_<nn::LossMonitor, nn::Callback>(m, "LossMonitor")
      .def(py::init<std::int64_t>(), py::arg("per_print_times") = 1);
  py::class_<nn::TimeMonitor, nn::Callback>(m, "TimeMonitor").def(py::init<>());
  py::class_<checkpoint::CheckpointConfig>(m, "CheckpointConfig")
      .def(py::init([](std::int64_t save_checkpoint_steps, std::int64_t keep_checkpoint_max) {
             return checkpoint::CheckpointConfig{save_checkpoint_steps, keep_checkpoint_max};
           }),
           py::arg("save_checkpoint_steps") = 1, py::arg("keep_checkpoint_max") = 5)
      .def_readwrite("save_checkpoint_steps", &checkpoint::CheckpointConfig::save_checkpoint_steps)
      .def_readwrite("keep_checkpoint_max", &checkpoint::CheckpointConfig::keep_checkpoint_max);
  py::class_<checkpoint::ModelCheckpoint, nn::Callback>(m, "ModelCheckpoint")
      .def(py::init<std::string, std::string, checkpoint::CheckpointConfig>(),
           py::arg("prefix") = "CKP", py::arg("directory") = ".",
           py::arg("config") = checkpoint::CheckpointConfig{})
      .def_property_readonly("latest", &checkpoint::ModelCheckpoint::latest);
  py::class_<summary::SummaryCollector, nn::Callback>(m, "SummaryCollector")
      .def(py::init([](std::string summary_dir, std::int64_t collect_freq,
                       const std::vector<std::string>& collect) {
             summary::SummaryCollectorOptions o;
             o.collect_freq = collect_freq;
             for (const std::string& c : collect) summary::select_collection(o, c);
             return std::make_unique<summary::SummaryCollector>(std::move(summary_dir), o);
           }),
           py::arg("summary_dir"), py::arg("collect_freq") = 10,
           py::arg("collect") = std::vector<std::string>{},
           "MindSpore's SummaryCollector: TensorBoard event files in summary_dir every "
           "collect_freq steps; collect: '+NAME' / '-NAME' items as loom train "
           "--summary-collect takes them");
  py::class_<PyRunContext>(m, "RunContext",
                           "MindSpore's run_context and cb_params in one: original_args() is the "
                           "object itself")
      .def("original_args", [](PyRunContext& r) { return r; })
      .def("request_stop", [](PyRunContext& r) { r.rc->request_stop(); })
      .def_property_readonly("epoch_num", [](const PyRunContext& r) { return r.rc->epoch_num; })
      .def_property_readonly("cur_epoch_num",
                             [](const PyRunContext& r) { return r.rc->cur_epoch_num; })
      .def_property_readonly("batch_num", [](const PyRunContext& r) { return r.rc->batch_num; })
      .def_property_readonly("cur_step_num",
                             [](const PyRunContext& r) { return r.rc->cur_step_num; })
      .def_property_readonly("step_in_epoch",
                             [](const PyRunContext& r) { return r.rc->step_in_epoch; })
      .def_property_readonly("net_outputs", [](const PyRunContext& r) { return r.rc->loss; })
      .def_property_readonly("epoch_loss_mean",
                             [](const PyRunContext& r) { return r.rc->epoch_loss_mean; })
      .def_property_readonly("metrics", [](const PyRunContext& r) { return r.rc->metrics; });

  // ---- the profiler (debug/profiler.h), MindSpore's Profiler ----
  py::class_<debug::Profiler, std::shared_ptr<debug::Profiler>>(m, "Profiler",
      "MindSpore's Profiler: pass it among Model.train's callbacks (steps start_step..stop_step "
      "are recorded), or start()/stop() around compiled calls; analyse() writes the tables, the "
      "timeline and the memory plan into output_path (docs/profiling.md)")
      .def(py::init([](std::string output_path, std::int64_t start_step, std::int64_t stop_step,
                       bool profile_memory, bool profile_communication) {
             return std::make_shared<debug::Profiler>(debug::ProfilerOptions{
                 .output_path = std::move(output_path),
                 .start_step = start_step,
                 .stop_step = stop_step,
                 .profile_memory = profile_memory,
                 .profile_communication = profile_communication,
                 .device = nn::context_device()});
           }),
           py::arg("output_path") = "profile", py::arg("start_step") = 1,
           py::arg("stop_step") = 10, py::arg("profile_memory") = false,
           py::arg("profile_communication") = false)
      .def("start", &debug::Profiler::start)
      .def("stop", &debug::Profiler::stop)
      .def("analyse", [](debug::Profiler& p) {
        py::gil_scoped_release release;
        return p.analyse();
      })
      .def_property_readonly("steps_recorded", &debug::Profiler::steps_recorded);

  // ---- the debugger's tools (debug/): among Model.train's callbacks, as the profiler ----
  py::class_<debug::NumericsChecker, std::shared_ptr<debug::NumericsChecker>>(
      m, "NumericsChecker",
      "loom train --check-numerics: every launch's outputs checked; the first NaN or Inf stops "
      "training with an error naming the node (its inputs and outputs dumped to dump_dir)")
      .def(py::init([](std::string dump_dir, std::string net_name) {
             return std::make_shared<debug::NumericsChecker>(
                 debug::NumericsOptions{.dump_dir = std::move(dump_dir),
                                        .net_name = std::move(net_name)});
           }),
           py::arg("dump_dir") = "numerics_dump", py::arg("net_name") = "Net");
  py::class_<debug::Dumper, std::shared_ptr<debug::Dumper>>(
      m, "Dumper",
      "MindSpore's dump: every launch's inputs and outputs in MindSpore's layout, configured by "
      "a data_dump.json (config_file) or into a directory with the defaults (path)")
      .def(py::init([](const std::string& config_file, const std::string& path,
                       const std::string& net_name) {
             if (config_file.empty() == path.empty()) {
               throw ValueError("Dumper: expected exactly one of config_file and path");
             }
             return std::make_shared<debug::Dumper>(
                 config_file.empty() ? debug::dump_config_for_dir(path, net_name)
                                     : debug::load_dump_config(config_file));
           }),
           py::arg("config_file") = "", py::arg("path") = "", py::arg("net_name") = "Net");

  py::class_<debug::Watcher, std::shared_ptr<debug::Watcher>>(
      m, "Watcher",
      "MindInsight's watchpoints (loom train --watch): conditions as `loom debug` takes them "
      "(\"nan;activation_range(range_start_inclusive=-1, ...)@/fc1/\"...), checked on steps "
      "every `every`; each hit printed to stderr as it happens and kept in hits; stop_on_hit "
      "stops training after the step of the first hit")
      .def(py::init([](const std::string& spec, std::int64_t every, bool stop_on_hit,
                       bool verbose) {
             return std::make_shared<debug::Watcher>(
                 debug::parse_watch_spec(spec),
                 debug::WatchOptions{.every = every,
                                     .stop_on_hit = stop_on_hit,
                                     .on_hit = [verbose](const debug::WatchHit& h) {
                                       if (verbose) std::cerr << debug::format_watch_hit(h) << "\n";
                                     }});
           }),
           py::arg("spec"), py::arg("every") = 1, py::arg("stop_on_hit") = false,
           py::arg("verbose") = true)
      .def_property_readonly("hits",
                             [](const debug::Watcher& w) {
                               std::vector<std::string> out;
                               for (const debug::WatchHit& h : w.hits()) {
                                 out.push_back(debug::format_watch_hit(h));
                               }
                               return out;
                             })
      .def_property_readonly("stopped", &debug::Watcher::stopped);

  // ---- Model ----
  py::class_<nn::Model, std::shared_ptr<nn::Model>>(m, "Model")
      .def(py::init([](std::shared_ptr<nn::Cell> network, std::shared_ptr<nn::Cell> loss_fn,
                       std::shared_ptr<optim::Optimizer> optimizer, const py::object& metrics) {
             if (!optimizer) {
               throw ValueError("Model: expected an optimizer (evaluation-only Models are not "
                                "supported yet), got None");
             }
             return std::make_shared<nn::Model>(std::move(network), std::move(loss_fn),
                                                std::move(optimizer), metrics_of(metrics));
           }),
           py::arg("network"), py::arg("loss_fn"), py::arg("optimizer"),
           py::arg("metrics") = py::none())
      .def(
          "train",
          [](nn::Model& model, std::int64_t epoch, const data::DatasetPtr& train_dataset,
             const py::object& callbacks, bool dataset_sink_mode) {
            if (dataset_sink_mode) {
              throw ValueError("Model.train: dataset_sink_mode=True is not supported (loom feeds "
                               "batches from the host)");
            }
            run_training(model, epoch, train_dataset, callbacks);
          },
          py::arg("epoch"), py::arg("train_dataset"), py::arg("callbacks") = py::none(),
          py::arg("dataset_sink_mode") = false)
      .def(
          "eval",
          [](nn::Model& model, const data::DatasetPtr& valid_dataset) {
            py::gil_scoped_release release;
            return model.eval(valid_dataset);
          },
          py::arg("valid_dataset"))
      .def("_set_save_graphs_dir", &nn::Model::set_save_graphs_dir)
      .def("_set_loss_scale",
           [](nn::Model& model, const nn::LossScale& ls) {
             model.build_train_network().set_loss_scale(ls);
           })
      .def("_set_amp",
           [](nn::Model& model, const std::string& level, const std::string& dtype) {
             model.set_amp({.level = passes::amp_level_from_name(level),
                            .dtype = passes::amp_dtype_from_name(dtype)});
           })
      .def_property_readonly(
          "float32_fallbacks",
          [](nn::Model& model) {
            return model.train_network()
                       ? model.train_network()->compiled_function().float32_fallbacks()
                       : std::vector<std::string>{};
          },
          "ops of the training step that computed in Float32 on low-precision values, for want "
          "of a Float16 / BFloat16 kernel (amp)")
      .def_property_readonly(
          "loss_scale",
          [](nn::Model& model) { return model.build_train_network().loss_scale(); },
          "the current loss scale (1 without loss scaling)")
      .def_property_readonly(
          "skipped_steps",
          [](nn::Model& model) { return model.build_train_network().skipped_steps(); },
          "training steps whose update loss scaling skipped (an Inf or NaN gradient)")

      .def("predict", [](nn::Model& model, const Tensor& x) {
        py::gil_scoped_release release;
        return model.predict(x);
      });

  // ---- data ----
  py::class_<data::Transform, std::shared_ptr<data::Transform>>(m, "Transform")
      .def("__repr__", &data::Transform::name);
  m.def("Rescale", &data::Rescale, py::arg("rescale"), py::arg("shift"));
  m.def("Normalize", &data::Normalize, py::arg("mean"), py::arg("std"));
  m.def("HWC2CHW", &data::HWC2CHW);
  m.def("Resize", &data::Resize, py::arg("size"));
  m.def("Pad", &data::Pad, py::arg("padding"), py::arg("fill_value") = 0);
  m.def("RandomCrop", &data::RandomCrop, py::arg("size"),
        py::arg("padding") = std::vector<std::int64_t>{});
  m.def("RandomHorizontalFlip", &data::RandomHorizontalFlip, py::arg("prob") = 0.5);
  m.def("TypeCast", &data::TypeCast, py::arg("data_type"));

  py::class_<data::Dataset, std::shared_ptr<data::Dataset>>(m, "Dataset")
      .def(
          "map",
          [](const data::Dataset& d, const py::object& operations, const std::string& column) {
            std::vector<data::TransformPtr> ops;
            if (py::isinstance<data::Transform>(operations)) {
              ops.push_back(operations.cast<data::TransformPtr>());
            } else {
              ops = operations.cast<std::vector<data::TransformPtr>>();
            }
            return d.map(std::move(ops), column);
          },
          py::arg("operations"), py::arg("input_columns") = "image")
      .def("shuffle", &data::Dataset::shuffle, py::arg("buffer_size") = 0)
      .def("shard", &data::Dataset::shard, py::arg("num_shards"), py::arg("shard_id"))
      .def("batch", &data::Dataset::batch, py::arg("batch_size"),
           py::arg("drop_remainder") = false)
      .def("repeat", &data::Dataset::repeat, py::arg("count"))
      .def("take", &data::Dataset::take, py::arg("count"))
      .def("get_dataset_size", &data::Dataset::size)
      .def("get_col_names", &data::Dataset::column_names)
      .def("__len__", &data::Dataset::size)
      .def(
          "__getitem__",
          [](const data::Dataset& d, std::int64_t i) {
            if (i < 0 || i >= d.size()) {
              throw py::index_error("dataset row " + std::to_string(i) + " of " +
                                    std::to_string(d.size()));
            }
            const data::Row row = d.get(0, i);
            py::tuple t(row.size());
            for (std::size_t k = 0; k < row.size(); ++k) t[k] = py::cast(row[k]);
            return t;
          },
          "Row i of epoch 0 as a tuple of tensors")
      .def("__repr__", &data::Dataset::describe);
  m.def(
      "NumpySlicesDataset",
      [](const py::object& data, const std::vector<std::string>& column_names) {
        std::vector<Tensor> tensors;
        std::vector<std::string> names = column_names;
        if (py::isinstance<py::dict>(data)) {
          names.clear();
          for (const auto& [k, v] : data.cast<py::dict>()) {
            names.push_back(py::str(k));
            tensors.push_back(py::module_::import("loom._loom").attr("Tensor")(v).cast<Tensor>());
          }
        } else {
          for (const py::handle& v : data) {
            tensors.push_back(py::module_::import("loom._loom").attr("Tensor")(v).cast<Tensor>());
          }
          if (names.empty()) {
            for (std::size_t i = 0; i < tensors.size(); ++i) {
              names.push_back("column_" + std::to_string(i));
            }
          }
        }
        return data::TensorSlicesDataset(std::move(names), std::move(tensors));
      },
      py::arg("data"), py::arg("column_names") = std::vector<std::string>{});
  m.def(
      "GeneratorDataset",
      [](py::object source, const std::vector<std::string>& column_names) -> data::DatasetPtr {
        return std::make_shared<PyDataset>(std::move(source), column_names);
      },
      py::arg("source"), py::arg("column_names"));
  m.def("MnistDataset", &data::MnistDataset, py::arg("dataset_dir"), py::arg("usage") = "train");
  m.def("Cifar10Dataset", &data::Cifar10Dataset, py::arg("dataset_dir"),
        py::arg("usage") = "train");
}

}  // namespace loom::python
