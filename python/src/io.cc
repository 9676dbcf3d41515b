// Checkpoints, MindIR and the model zoo from Python: the C++ halves of python/loom/io.py and
// python/loom/models.py, which give them MindSpore's names and arguments.
//
//   checkpoints: checkpoint/checkpoint.h's save_checkpoint (atomic, ".ckpt" appended),
//     load_checkpoint (checked: a corrupt file is a FormatError naming it) and
//     load_param_into_net (in place), on (name, Tensor or str) entries;
//   MindIR: mindir::export_mindir on a Cell and example tensors; GraphNet (mindir/graph_net.h) a
//     file as a trainable Cell; load_mindir gives a MindIRGraph
//     (the loaded mindir::GraphCell, shared), and GraphCell is the nn::Cell that runs one: a call
//     from Python outside a trace runs the loaded graph's own compiled function on the context's
//     device (as `loom run` does); inside a trace (the GraphCell a child of a Cell being compiled)
//     its construct re-emits the loaded graph's primitive calls into the enclosing trace, the
//     file's weights as constants;
//   the zoo: models::LeNet5, models::make_resnet and every recipe's make_network (what
//     `loom train` builds), as Cells with the zoo's parameter names.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "checkpoint/checkpoint.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/trace/tracer.h"
#include "mindir/graph_net.h"
#include "mindir/mindir.h"
#include "onnx/graph_net.h"
#include "onnx/onnx.h"
#include "models/lenet/lenet.h"
#include "models/resnet/resnet.h"
#include "models/zoo.h"
#include "nn/cell.h"
#include "nn/context.h"
#include "python/src/bindings.h"

namespace loom::python {

namespace {

// ---- checkpoints ----

// A checkpoint's entries as Python sees them: (name, loom.Tensor) or (name, str), tensors first
// in file order, then the strings.
using Entries = std::vector<std::pair<std::string, py::object>>;

checkpoint::Checkpoint checkpoint_of(const Entries& entries) {
  checkpoint::Checkpoint ck;
  for (const auto& [name, value] : entries) {
    if (py::isinstance<py::str>(value)) {
      ck.strings.emplace_back(name, value.cast<std::string>());
    } else if (py::isinstance<Tensor>(value)) {
      ck.tensors.emplace_back(name, backend::to_host(value.cast<Tensor>()));
    } else {
      throw TypeError("save_checkpoint: expected a Tensor or a str for '" + name + "', got a " +
                      std::string(py::str(py::type::of(value).attr("__name__"))));
    }
  }
  return ck;
}

std::string save_entries(const Entries& entries, const std::string& path, bool crc) {
  checkpoint::Checkpoint ck = checkpoint_of(entries);
  py::gil_scoped_release release;
  return checkpoint::save_checkpoint(ck, path, {.crc = crc});
}

Entries load_entries(const std::string& path, bool crc_check) {
  checkpoint::Checkpoint ck;
  {
    py::gil_scoped_release release;
    ck = checkpoint::load_checkpoint(path, {.crc_check = crc_check});
  }
  Entries out;
  for (auto& [name, t] : ck.tensors) out.emplace_back(name, py::cast(std::move(t)));
  for (auto& [name, s] : ck.strings) out.emplace_back(name, py::str(s));
  return out;
}

std::pair<std::vector<std::string>, std::vector<std::string>> load_params(
    nn::Cell& net, const checkpoint::NamedTensors& params, bool strict_load) {
  py::gil_scoped_release release;
  return checkpoint::load_param_into_net(net, params, strict_load);
}

// ---- MindIR ----

using GraphPtr = std::shared_ptr<mindir::GraphCell>;

py::list tensor_infos(const std::vector<mindir::TensorInfo>& infos) {
  py::list out;
  for (const mindir::TensorInfo& i : infos) {
    out.append(py::make_tuple(i.name, i.dtype, py::tuple(py::cast(i.shape))));
  }
  return out;
}

// MindSpore's nn.GraphCell: a Cell running a loaded MindIR graph (see the file comment).
class GraphCell : public nn::Cell {
 public:
  explicit GraphCell(GraphPtr graph) : nn::Cell("GraphCell"), graph_(std::move(graph)) {
    if (!graph_) throw ValueError("GraphCell: expected a graph from loom.load, got None");
  }

  ops::Var construct(const std::vector<ops::Var>& inputs) override {
    const bool concrete = std::all_of(inputs.begin(), inputs.end(), [](const ops::Var& v) {
      return v.is_value() && v.value().is_tensor();
    });
    if (concrete) {
      std::vector<Tensor> xs;
      for (const ops::Var& v : inputs) xs.push_back(v.value().as_tensor());
      return ops::Var(run(xs));
    }
    if (inputs.size() != graph_->inputs().size()) {
      throw ValueError("GraphCell: expected " + std::to_string(graph_->inputs().size()) +
                       " inputs, got " + std::to_string(inputs.size()));
    }
    // The file's weights as constants (mindir::GraphNet is the trainable form).
    ops::Emitter& e = nn::current_emitter();
    std::vector<ops::Var> weights;
    const auto& params = graph_->graph().parameters();
    for (std::size_t i = inputs.size(); i < params.size(); ++i) {
      if (!params[i]->has_default()) {
        throw ValueError("GraphCell: expected graph parameter '" + params[i]->name() +
                         "' to be an input or a weight, got neither");
      }
      weights.push_back(e.constant(ir::Value::tensor(*params[i]->default_value())));
    }
    return mindir::emit_graph(e, graph_->graph(), inputs, weights);
  }

  // The loaded graph's compiled function on the context's device.
  ir::Value run(const std::vector<Tensor>& inputs) {
    graph_->to_device(nn::context_backend());
    return graph_->run_value(inputs);
  }

  const GraphPtr& graph() const { return graph_; }

 private:
  GraphPtr graph_;
};

// ---- the zoo ----

models::ResNetLayout layout_of(const std::string& layout) {
  if (layout == "imagenet") return models::ResNetLayout::kImageNet;
  if (layout == "small") return models::ResNetLayout::kSmallImage;
  throw ValueError("resnet: expected layout 'imagenet' or 'small', got '" + layout + "'");
}

}  // namespace

void init_io(py::module_& m) {
  m.def("save_checkpoint", &save_entries, py::arg("entries"), py::arg("path"),
        py::arg("crc") = false,
        "Writes (name, Tensor or str) entries as a MindSpore checkpoint; returns the path "
        "written (\".ckpt\" appended when missing)");
  m.def("load_checkpoint", &load_entries, py::arg("path"), py::arg("crc_check") = false,
        "A checkpoint's (name, Tensor) entries in file order, then its (name, str) entries");
  m.def("load_param_into_net", &load_params, py::arg("net"), py::arg("params"),
        py::arg("strict_load") = false,
        "Copies the tensors into the Cell's parameters of the same names; returns "
        "(param_not_load, ckpt_not_load)");

  m.def(
      "export_mindir",
      [](nn::Cell& net, const std::vector<Tensor>& inputs, const std::string& path) {
        py::gil_scoped_release release;  // a Python construct takes the GIL back
        mindir::export_mindir(net, inputs, path);
      },
      py::arg("net"), py::arg("inputs"), py::arg("path"));

  py::class_<mindir::GraphCell, GraphPtr>(
      m, "MindIRGraph",
      "A loaded MindIR model (loom.load): run it with loom.nn.GraphCell(graph)")
      .def_property_readonly("inputs",
                             [](const mindir::GraphCell& g) { return tensor_infos(g.inputs()); })
      .def_property_readonly("outputs",
                             [](const mindir::GraphCell& g) { return tensor_infos(g.outputs()); })
      .def_property_readonly("parameters", &mindir::GraphCell::parameters)
      .def_property_readonly("op_counts", &mindir::GraphCell::op_counts)
      .def_property_readonly("producer", &mindir::GraphCell::producer)
      .def_property_readonly("model_version", &mindir::GraphCell::model_version)
      .def_property_readonly("mind_ir_version", &mindir::GraphCell::mind_ir_version)
      .def("__repr__", [](const mindir::GraphCell& g) {
        return "MindIRGraph(producer=" + g.producer() + ", " +
               std::to_string(g.inputs().size()) + " inputs, " +
               std::to_string(g.parameters().size()) + " parameters)";
      });
  m.def(
      "load_mindir",
      [](const std::string& path) {
        py::gil_scoped_release release;
        return std::make_shared<mindir::GraphCell>(mindir::load_mindir(path));
      },
      py::arg("path"));
  m.def(
      "load_onnx",
      [](const std::string& path) {
        py::gil_scoped_release release;
        return std::make_shared<mindir::GraphCell>(onnx::load_onnx(path));
      },
      py::arg("path"));

  py::class_<GraphCell, nn::Cell, std::shared_ptr<GraphCell>>(
      m, "GraphCell",
      "MindSpore's nn.GraphCell: a Cell running a graph loaded by loom.load; called outside a "
      "trace it runs the graph compiled once per input signature on the context's device")
      .def(py::init<GraphPtr>(), py::arg("graph"))
      .def_property_readonly("graph", &GraphCell::graph)
      // Outside a trace the graph runs as loaded, in either mode (MindSpore's GraphCell is a
      // compiled graph in PyNative mode too); inside one, the Cell call emits it (construct).
      .def(
          "_call",
          [](GraphCell& c, const py::list& inputs, const py::object& site) -> py::object {
            if (trace::current() == nullptr) {
              std::vector<Tensor> xs;
              for (const py::handle& x : inputs) {
                ops::Var v = to_var(x);
                if (!v.is_value() || !v.value().is_tensor()) {
                  throw TypeError("GraphCell: expected tensor inputs, got " +
                                  std::string(py::str(py::type::of(x).attr("__name__"))));
                }
                xs.push_back(v.value().as_tensor());
              }
              ir::Value out;
              {
                py::gil_scoped_release release;
                out = c.run(xs);
              }
              return from_value(out);
            }
            std::vector<ops::Var> vars;
            for (const py::handle& x : inputs) vars.push_back(to_var(x));
            std::optional<trace::Site> s;
            if (!site.is_none()) {
              auto [file, line] = site.cast<std::pair<std::string, int>>();
              s = trace::Site{file, line};
            }
            return from_var(c.call_at(std::move(vars), s ? &*s : nullptr));
          },
          py::arg("inputs"), py::arg("site") = py::none());

  py::class_<mindir::GraphNet, nn::Cell, std::shared_ptr<mindir::GraphNet>>(
      m, "GraphNet",
      "A MindIR file (loom's or MindSpore's) or an ONNX file (a name ending in .onnx: "
      "PyTorch's torch.onnx.export) as a trainable Cell: its weights are Parameters named as in "
      "the file, so it fine-tunes like any Cell and loom.save_checkpoint writes those names")
      .def(py::init([](const std::string& file_name) {
             py::gil_scoped_release release;
             const bool onnx = file_name.size() >= 5 &&
                               file_name.compare(file_name.size() - 5, 5, ".onnx") == 0;
             return onnx ? onnx::load_onnx_net(file_name) : mindir::load_mindir_net(file_name);
           }),
           py::arg("file_name"));

  py::class_<models::LeNet5, nn::Cell, std::shared_ptr<models::LeNet5>>(m, "LeNet5")
      .def(py::init<std::int64_t, std::int64_t>(), py::arg("num_class") = 10,
           py::arg("num_channel") = 1);
  py::class_<models::ResNet, nn::Cell, std::shared_ptr<models::ResNet>>(m, "ResNet")
      .def(py::init([](int depth, std::int64_t num_classes, std::int64_t in_channels,
                       const std::string& layout) {
             return models::make_resnet(depth, {.num_classes = num_classes,
                                                .in_channels = in_channels,
                                                .layout = layout_of(layout)});
           }),
           py::arg("depth"), py::arg("num_classes") = 10, py::arg("in_channels") = 3,
           py::arg("layout") = "imagenet")
      .def_property_readonly("depth", &models::ResNet::depth);
  m.def("zoo_names", [] {
    std::vector<std::string> names;
    for (const models::Recipe& r : models::recipes()) names.push_back(r.name);
    return names;
  });
  m.def(
      "zoo_network",
      [](const std::string& name, const std::string& dataset,
         std::optional<std::int64_t> num_classes) {
        const models::Recipe& r = models::recipe(name);
        return r.make_network({.dataset = dataset.empty() ? r.defaults.dataset : dataset,
                               .num_classes = num_classes});
      },
      py::arg("name"), py::arg("dataset") = "", py::arg("num_classes") = py::none());
}

}  // namespace loom::python
