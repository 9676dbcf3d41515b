// Gradients of Python functions: the function is traced once per input signature into a graph
// (its arguments become the graph's parameters as loom.Var; the loom.ops it calls become nodes),
// autodiff::grad builds the gradient graph, and a CompiledFunction compiles it on the context's
// device. loom.grad and loom.value_and_grad (python/loom/_autodiff.py) keep one GradFunction per
// signature.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/autodiff/grad.h"
#include "core/ir/abstract.h"
#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "core/ir/verify.h"
#include "core/passes/infer.h"
#include "core/trace/tracer.h"
#include "nn/cell.h"
#include "nn/context.h"
#include "python/src/bindings.h"
#include "runtime/compiled_function.h"

namespace loom::python {

namespace {

// Traces fn into a new graph of `module` on parameters of the given abstracts; its output is fn's
// one tensor result. The Cells fn calls make their parameters graph weights (parameters after
// the inputs, with defaults); `weight_keys` gets their nn::Parameter keys in that order.
ir::FuncGraph* trace_function(ir::Module& module, const py::function& fn,
                              const std::vector<ir::AbstractPtr>& inputs, const std::string& name,
                              std::vector<const void*>* weight_keys = nullptr) {
  ir::FuncGraph* f = module.add_graph(name);
  std::vector<ops::Var> params;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    params.emplace_back(f->add_parameter("x" + std::to_string(i), inputs[i]));
  }
  trace::Tracer tracer(f);
  trace::TracerScope scope(tracer);
  py::tuple args(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) args[i] = py::cast(params[i]);
  py::object out = fn(*args);
  if (py::isinstance<py::tuple>(out) || py::isinstance<py::list>(out)) {
    throw TypeError(name + ": expected the function to return one tensor to differentiate, "
                    "got a " + std::string(py::str(py::type::of(out).attr("__name__"))));
  }
  ops::Var o = to_var(out);
  if (o.is_value()) o = tracer.constant(o.value());
  f->set_output(o.node());
  passes::infer_graph(f);
  if (weight_keys) *weight_keys = tracer.weight_order();
  return f;
}

ir::FuncGraph* grad_graph(ir::FuncGraph* f, bool return_value,
                          std::vector<ir::Parameter*> weights = {}) {
  autodiff::GradOptions options;
  options.get_all = true;
  options.return_value = return_value;
  options.get_by_list = !weights.empty();
  options.weights = std::move(weights);
  ir::FuncGraph* g = autodiff::grad(f, options);
  passes::infer_graph(g);
  return g;
}

// grad inside another function's trace (higher order): fn traced into the enclosing graph's
// module, differentiated, and called from the enclosing graph on `args` (its Vars), so that the
// enclosing trace can itself be differentiated.
py::object grad_in_trace(const py::function& fn, const py::list& args, bool return_value,
                         const std::string& name) {
  trace::Tracer* outer = trace::current_tracer();
  if (outer == nullptr) throw InternalError("grad_in_trace: expected an enclosing trace");
  std::vector<ops::Var> vars;
  std::vector<ir::AbstractPtr> inputs;
  for (const py::handle& a : args) {
    vars.push_back(to_var(a));
    inputs.push_back(outer->abstract_of(vars.back()));
  }
  std::vector<const void*> keys;
  ir::FuncGraph* f = trace_function(*outer->target()->module(), fn, inputs, name, &keys);
  ir::FuncGraph* g = grad_graph(f, return_value);
  std::vector<ir::Node*> nodes;
  for (const ops::Var& v : vars) nodes.push_back(outer->node_of(v));
  // The weights of the Cells fn called are the enclosing trace's weights for the same
  // Parameters, so that the enclosing gradient sees through them too.
  for (std::size_t k = 0; k < keys.size(); ++k) {
    const ir::Parameter* w = f->parameters()[vars.size() + k];
    nodes.push_back(outer->weight(keys[k], w->name(), *w->default_value()));
  }
  ir::CNode* call = outer->target()->add_call(g, nodes, outer->debug_for("grad"));
  call->set_abstract(g->output()->abstract());
  return from_var(ops::Var(call));
}

class GradFunction {
 public:
  // Traces fn on tensors of `signature` (dtype, shape each) and differentiates it with respect to
  // every argument and, when `weights` are given (MindSpore's weights=, net.trainable_params()),
  // those Parameters; return_value: the compiled graph returns (output, gradients).
  GradFunction(const py::function& fn, const std::vector<std::pair<DType, Shape>>& signature,
               bool return_value, const std::string& name, const std::vector<ParamRef>& weights)
      : module_(std::make_unique<ir::Module>()), return_value_(return_value), wanted_(weights) {
    std::vector<ir::AbstractPtr> inputs;
    for (const auto& [d, s] : signature) inputs.push_back(ir::Abstract::tensor(d, s));
    std::vector<const void*> keys;
    ir::FuncGraph* f = trace_function(*module_, fn, inputs, name, &keys);
    module_->set_entry(f);
    ir::verify(*module_);
    // The traced weights, by Parameter: each call passes their current values (a Parameter
    // trained since the trace is read as it is now).
    for (const void* k : keys) traced_.push_back(static_cast<nn::Parameter*>(const_cast<void*>(k)));
    std::vector<ir::Parameter*> diff;
    for (const ParamRef& w : wanted_) {
      auto it = std::find(traced_.begin(), traced_.end(), w.param);
      slot_.push_back(it == traced_.end() ? -1 : static_cast<int>(diff.size()));
      if (it != traced_.end()) {
        diff.push_back(f->parameters()[inputs.size() + static_cast<std::size_t>(it - traced_.begin())]);
      }
    }
    ir::FuncGraph* g = grad_graph(f, return_value, diff);
    fn_ = runtime::CompiledFunction::of_graph(
        g, runtime::FunctionOptions{.name = name + "_grad", .backend = &nn::context_backend()});
    signature_ = inputs;
    for (nn::Parameter* p : traced_) {
      signature_.push_back(ir::Abstract::tensor(p->value.dtype(), p->value.shape()));
    }
  }

  // The gradient of every argument (a tuple), after the output when return_value; with weights,
  // (the arguments' tuple, the weights' tuple: zeros for a weight fn does not read).
  py::object run(const std::vector<Tensor>& args) {
    std::vector<ir::Value> values;
    for (const Tensor& t : args) values.push_back(ir::Value::tensor(t));
    for (nn::Parameter* p : traced_) values.push_back(ir::Value::tensor(p->value));
    ir::Value out;
    runtime::CompiledFunction::Entry& e = fn_->entry(signature_);
    {
      py::gil_scoped_release release;
      out = fn_->run(e, std::move(values));
    }
    if (wanted_.empty()) return from_value(out);
    ir::Value grads = return_value_ ? out.elements().at(1) : out;
    // autodiff's (inputs, weights) when it differentiated weights, else the inputs' tuple.
    const bool any = std::any_of(slot_.begin(), slot_.end(), [](int s) { return s >= 0; });
    ir::Value in = any ? grads.elements().at(0) : grads;
    std::vector<ir::Value> w;
    for (std::size_t i = 0; i < wanted_.size(); ++i) {
      if (slot_[i] >= 0) {
        w.push_back(grads.elements().at(1).elements().at(static_cast<std::size_t>(slot_[i])));
      } else {
        const Tensor& v = wanted_[i].param->value;
        w.push_back(ir::Value::tensor(Tensor(v.dtype(), v.shape())));  // zero-filled
      }
    }
    ir::Value both = ir::Value::tuple({in, ir::Value::tuple(std::move(w))});
    return from_value(return_value_ ? ir::Value::tuple({out.elements().at(0), both}) : both);
  }

 private:
  std::unique_ptr<ir::Module> module_;
  std::unique_ptr<runtime::CompiledFunction> fn_;
  std::vector<ir::AbstractPtr> signature_;
  bool return_value_;
  std::vector<ParamRef> wanted_;       // the weights= Parameters, in order
  std::vector<int> slot_;              // each one's index among the differentiated, or -1
  std::vector<nn::Parameter*> traced_;  // the graph's weights, in parameter order
};

}  // namespace

void init_autodiff(py::module_& m) {
  py::class_<GradFunction>(m, "GradFunction",
                           "A Python function traced for one input signature, differentiated "
                           "with respect to every argument and compiled")
      .def(py::init<const py::function&, const std::vector<std::pair<DType, Shape>>&, bool,
                    const std::string&, const std::vector<ParamRef>&>(),
           py::arg("fn"), py::arg("signature"), py::arg("return_value"), py::arg("name"),
           py::arg("weights") = std::vector<ParamRef>{})
      .def("run", &GradFunction::run, py::arg("args"));
  m.def("grad_in_trace", &grad_in_trace, py::arg("fn"), py::arg("args"), py::arg("return_value"),
        py::arg("name"));
}

}  // namespace loom::python
