// The layers of nn/layers.h: parameters registered with MindSpore's default initializers, and
// construct bodies written against the nn op functions, so each runs eagerly or traced.
#include "nn/layers.h"

#include <algorithm>
#include <cmath>

#include "core/ir/error.h"
#include "nn/initializer.h"

namespace loom::nn {
namespace {

const ops::Var& single_input(const Cell& cell, const std::vector<ops::Var>& inputs) {
  if (inputs.size() != 1) {
    throw ValueError(cell.cls_name() + ": expected 1 input, got " +
                     std::to_string(inputs.size()));
  }
  return inputs[0];
}

std::shared_ptr<const Initializer> default_weight_init() {
  return std::make_shared<HeUniform>(std::sqrt(5.0));
}

std::shared_ptr<const Initializer> default_bias_init(std::int64_t fan_in) {
  return std::make_shared<Uniform>(1.0 / std::sqrt(static_cast<double>(fan_in)));
}

}  // namespace

Dense::Dense(std::int64_t in_channels, std::int64_t out_channels, bool has_bias)
    : Cell("Dense"), in_channels_(in_channels), out_channels_(out_channels) {
  if (in_channels <= 0 || out_channels <= 0) {
    throw ValueError("Dense: expected positive in_channels and out_channels, got " +
                     std::to_string(in_channels) + " and " + std::to_string(out_channels));
  }
  weight_ = &register_parameter("weight", {out_channels, in_channels}, DType::kFloat32,
                                default_weight_init());
  if (has_bias) {
    bias_ = &register_parameter("bias", {out_channels}, DType::kFloat32,
                                default_bias_init(in_channels));
  }
}

ops::Var Dense::construct(const std::vector<ops::Var>& inputs) {
  const ops::Var& x = single_input(*this, inputs);
  ir::AbstractPtr a = current_emitter().abstract_of(x);
  Shape s;
  const bool ranked = a && a->is_tensor() && a->has_rank();
  if (ranked) {
    s = a->shape();
    if (s.size() < 2) {
      throw ShapeError("Dense: expected x of rank >= 2 (..., in_channels " +
                       std::to_string(in_channels_) + "), got x of shape " + shape_to_string(s));
    }
    if (s.back() != ir::kUnknownDim && s.back() != in_channels_) {
      throw ShapeError("Dense: expected x's last dim to equal in_channels " +
                       std::to_string(in_channels_) + ", got x of shape " + shape_to_string(s));
    }
  }
  // Rank > 2, as MindSpore: reshape to (-1, in_channels), then back to (..., out_channels).
  const bool fold = ranked && s.size() > 2;
  Shape out_shape;
  if (fold) {
    out_shape.assign(s.begin(), s.end() - 1);
    out_shape.push_back(out_channels_);
    const auto unknown = std::count(out_shape.begin(), out_shape.end(), ir::kUnknownDim);
    if (unknown > 1) {
      throw ShapeError("Dense: expected at most one unknown leading dim, got x of shape " +
                       shape_to_string(s));
    }
  }
  ops::Emitter& e = current_emitter();
  ops::Var x2 = fold ? e.emit("Reshape", {x}, {{"shape", ir::Value::ints({-1, in_channels_})}})
                     : x;
  ops::Var y = matmul(x2, param(*weight_), false, true);
  if (bias_) y = bias_add(y, param(*bias_));
  if (fold) y = e.emit("Reshape", {y}, {{"shape", ir::Value::ints(out_shape)}});
  return y;
}

Conv2d::Conv2d(Conv2dOptions options) : Cell("Conv2d"), options_(std::move(options)) {
  const Conv2dOptions& o = options_;
  if (o.in_channels() <= 0 || o.out_channels() <= 0 || o.kernel_size() <= 0 || o.stride() <= 0) {
    throw ValueError("Conv2d: expected positive in_channels, out_channels, kernel_size and "
                     "stride, got " + std::to_string(o.in_channels()) + ", " +
                     std::to_string(o.out_channels()) + ", " + std::to_string(o.kernel_size()) +
                     " and " + std::to_string(o.stride()));
  }
  const std::int64_t k = o.kernel_size();
  weight_ = &register_parameter("weight", {o.out_channels(), o.in_channels(), k, k},
                                DType::kFloat32, default_weight_init());
  if (o.has_bias()) {
    bias_ = &register_parameter("bias", {o.out_channels()}, DType::kFloat32,
                                default_bias_init(o.in_channels() * k * k));
  }
}

ops::Var Conv2d::construct(const std::vector<ops::Var>& inputs) {
  const Conv2dOptions& o = options_;
  const ops::Var& x = single_input(*this, inputs);
  ir::AbstractPtr a = current_emitter().abstract_of(x);
  if (a && a->is_tensor() && a->has_rank()) {
    const Shape& s = a->shape();
    if (s.size() != 4) {
      throw ShapeError("Conv2d: expected x of rank 4 (N, C, H, W), got x of shape " +
                       shape_to_string(s));
    }
    if (s[1] != ir::kUnknownDim && s[1] != o.in_channels()) {
      throw ShapeError("Conv2d: expected input channels " + std::to_string(o.in_channels()) +
                       ", got x of shape " + shape_to_string(s));
    }
  }
  const std::int64_t p = o.padding();
  ops::Var y = conv2d(x, param(*weight_), o.out_channels(),
                      {o.kernel_size(), o.kernel_size()}, {o.stride(), o.stride()}, o.pad_mode(),
                      {p, p, p, p});
  if (bias_) y = bias_add(y, param(*bias_));
  return y;
}

ops::Var ReLU::construct(const std::vector<ops::Var>& inputs) {
  return relu(single_input(*this, inputs));
}

ops::Var Flatten::construct(const std::vector<ops::Var>& inputs) {
  return flatten(single_input(*this, inputs));
}

MaxPool2d::MaxPool2d(std::int64_t kernel_size, std::int64_t stride, std::string pad_mode)
    : Cell("MaxPool2d"), kernel_size_(kernel_size), stride_(stride), pad_mode_(std::move(pad_mode)) {}

ops::Var MaxPool2d::construct(const std::vector<ops::Var>& inputs) {
  return max_pool(single_input(*this, inputs), {kernel_size_, kernel_size_}, {stride_, stride_},
                  pad_mode_);
}

SequentialCell& SequentialCell::append(std::shared_ptr<Cell> cell) {
  cells_.push_back(&register_cell(std::to_string(cells_.size()), std::move(cell)));
  return *this;
}

ops::Var SequentialCell::construct(const std::vector<ops::Var>& inputs) {
  if (cells_.empty()) return single_input(*this, inputs);
  ops::Var x = (*cells_[0])(inputs);
  for (std::size_t i = 1; i < cells_.size(); ++i) x = (*cells_[i])(x);
  return x;
}

AvgPool2d::AvgPool2d(std::int64_t kernel_size, std::int64_t stride, std::string pad_mode)
    : Cell("AvgPool2d"), kernel_size_(kernel_size), stride_(stride), pad_mode_(std::move(pad_mode)) {}

ops::Var AvgPool2d::construct(const std::vector<ops::Var>& inputs) {
  return current_emitter().emit("AvgPool", {single_input(*this, inputs)},
                                {{"kernel_size", ir::Value::ints({kernel_size_, kernel_size_})},
                                 {"strides", ir::Value::ints({stride_, stride_})},
                                 {"pad_mode", ir::Value::string(pad_mode_)}});
}

ops::Var Sigmoid::construct(const std::vector<ops::Var>& inputs) {
  return current_emitter().emit("Sigmoid", {single_input(*this, inputs)});
}

ops::Var Tanh::construct(const std::vector<ops::Var>& inputs) {
  return current_emitter().emit("Tanh", {single_input(*this, inputs)});
}

ops::Var GELU::construct(const std::vector<ops::Var>& inputs) {
  return current_emitter().emit("GeLU", {single_input(*this, inputs)});
}

ops::Var Softmax::construct(const std::vector<ops::Var>& inputs) {
  return current_emitter().emit("Softmax", {single_input(*this, inputs)},
                                {{"axis", ir::Value::ints({axis_})}});
}

ops::Var Identity::construct(const std::vector<ops::Var>& inputs) {
  return single_input(*this, inputs);
}

Dropout::Dropout(double p) : Cell("Dropout"), keep_prob_(1.0 - p) {
  if (!(p >= 0.0 && p < 1.0)) {
    throw ValueError("Dropout: expected p in [0, 1), got " + ir::format_f64(p));
  }
  key_ = &register_parameter("key", {2}, DType::kInt64, std::make_shared<RandomKey>());
  key_->requires_grad = false;
}

std::shared_ptr<Dropout> Dropout::with_keep_prob(double keep_prob) {
  if (!(keep_prob > 0.0 && keep_prob <= 1.0)) {
    throw ValueError("Dropout: expected keep_prob in (0, 1], got " + ir::format_f64(keep_prob));
  }
  auto d = std::make_shared<Dropout>(0.0);
  d->keep_prob_ = keep_prob;
  return d;
}

ops::Var Dropout::construct(const std::vector<ops::Var>& inputs) {
  const ops::Var& x = single_input(*this, inputs);
  if (!training() || keep_prob_ >= 1.0) return x;
  ops::Emitter& e = current_emitter();
  const ops::Var key = param(*key_);
  ops::Var out = e.emit("Dropout", {x, key},
                        {{"keep_prob", ir::Value::f32(static_cast<float>(keep_prob_))}});
  // The next call's key: the Philox counter's upper word + 1 (a fresh block of the sequence).
  const Tensor one = Tensor::from_vector<std::int64_t>({2}, {0, 1});
  assign(*key_, e.add(key, e.constant(ir::Value::tensor(one))));
  return e.tuple_get(out, 0);
}

ops::Var ReLU6::construct(const std::vector<ops::Var>& inputs) {
  return current_emitter().emit("ReLU6", {single_input(*this, inputs)});
}

BatchNorm2d::BatchNorm2d(std::int64_t num_features, double eps, double momentum, bool affine,
                         const std::string& gamma_init, const std::string& beta_init,
                         const std::string& moving_mean_init, const std::string& moving_var_init,
                         std::optional<bool> use_batch_statistics)
    : Cell("BatchNorm2d"),
      num_features_(num_features),
      eps_(eps),
      momentum_(momentum),
      use_batch_statistics_(use_batch_statistics) {
  if (num_features <= 0) {
    throw ValueError("BatchNorm2d: expected a positive num_features, got " +
                     std::to_string(num_features));
  }
  if (!(momentum >= 0.0 && momentum <= 1.0)) {
    throw ValueError("BatchNorm2d: expected momentum in [0, 1], got " + ir::format_f64(momentum));
  }
  if (!(eps > 0.0)) {
    throw ValueError("BatchNorm2d: expected eps > 0, got " + ir::format_f64(eps));
  }
  auto reg = [&](const char* name, const std::string& init, bool trainable) {
    Parameter& p = register_parameter(name, {num_features}, DType::kFloat32,
                                      std::shared_ptr<const Initializer>(make_initializer(init)));
    p.requires_grad = trainable;
    return &p;
  };
  gamma_ = reg("gamma", gamma_init, affine);
  beta_ = reg("beta", beta_init, affine);
  moving_mean_ = reg("moving_mean", moving_mean_init, false);
  moving_variance_ = reg("moving_variance", moving_var_init, false);
}

ops::Var BatchNorm2d::construct(const std::vector<ops::Var>& inputs) {
  const ops::Var& x = single_input(*this, inputs);
  ops::Emitter& e = current_emitter();
  ir::AbstractPtr a = e.abstract_of(x);
  if (a && a->is_tensor() && a->has_rank()) {
    const Shape& s = a->shape();
    if (s.size() != 4) {
      throw ShapeError("BatchNorm2d: expected x of rank 4 (N, C, H, W), got x of shape " +
                       shape_to_string(s));
    }
    if (s[1] != ir::kUnknownDim && s[1] != num_features_) {
      throw ShapeError("BatchNorm2d: expected input channels " + std::to_string(num_features_) +
                       ", got x of shape " + shape_to_string(s));
    }
  }
  const bool batch_stats = use_batch_statistics_.value_or(training());
  const ops::Var out = e.emit(
      "BatchNorm",
      {x, param(*gamma_), param(*beta_), param(*moving_mean_), param(*moving_variance_)},
      {{"is_training", ir::Value::boolean(batch_stats)},
       {"epsilon", ir::Value::f32(static_cast<float>(eps_))},
       {"momentum", ir::Value::f32(static_cast<float>(1.0 - momentum_))}});
  if (batch_stats) {
    assign(*moving_mean_, e.tuple_get(out, 1));
    assign(*moving_variance_, e.tuple_get(out, 2));
  }
  return e.tuple_get(out, 0);
}

CellList& CellList::append(std::shared_ptr<Cell> cell) {
  cells_.push_back(&register_cell(std::to_string(cells_.size()), std::move(cell)));
  return *this;
}

Cell& CellList::operator[](std::size_t i) const {
  if (i >= cells_.size()) {
    throw ValueError("CellList: expected an index below " + std::to_string(cells_.size()) +
                     ", got " + std::to_string(i));
  }
  return *cells_[i];
}

ops::Var CellList::construct(const std::vector<ops::Var>&) {
  throw TypeError(
      "CellList: a CellList is a container and cannot be called; call its cells instead");
}

}  // namespace loom::nn
