/// \file
/// LeNet-5 as MindSpore's model zoo defines it (models/official/cv/lenet/src/lenet.py):
///
///     input (N, num_channel, 32, 32)
///     conv1  Conv2d(num_channel → 6, 5×5, pad_mode "valid", no bias)   → (N, 6, 28, 28)
///     relu, max_pool2d 2×2 stride 2                                      → (N, 6, 14, 14)
///     conv2  Conv2d(6 → 16, 5×5, "valid", no bias)                        → (N, 16, 10, 10)
///     relu, max_pool2d                                                    → (N, 16, 5, 5)
///     flatten                                                             → (N, 400)
///     fc1 Dense(400 → 120), relu, fc2 Dense(120 → 84), relu, fc3 Dense(84 → num_class)
///
/// Parameters, in registration order and named as MindSpore names them: conv1.weight (6,1,5,5),
/// conv2.weight (16,6,5,5), fc1.weight (120,400), fc1.bias (120), fc2.weight (84,120),
/// fc2.bias (84), fc3.weight (10,84), fc3.bias (10): 8 tensors, 61,684 values for the defaults.
/// Initial values follow MindSpore's layer defaults (nn/layers.h), drawn from the seed in force when
/// the network is made (core/random/random.h seed_all).
///
///     random::seed_all(1);
///     auto net = std::make_shared<models::LeNet5>();
///     ops::Var logits = (*net)(ops::Var(ir::Value::tensor(x)));   // x (N, 1, 32, 32) Float32
#pragma once

#include <cstdint>

#include "nn/cell.h"
#include "nn/layers.h"

namespace loom::models {

/// LeNet-5 of MindSpore's model zoo, with the layers and parameters listed above.
class LeNet5 : public nn::Cell {
 public:
  /// num_class outputs (fc3) for inputs of num_channel channels (conv1).
  explicit LeNet5(std::int64_t num_class = 10, std::int64_t num_channel = 1);
  /// The logits (N, num_class) of x = inputs[0], (N, num_channel, 32, 32).
  ops::Var construct(const std::vector<ops::Var>& inputs) override;

  /// The number of values in the parameters of LeNet5(num_class, num_channel).
  static std::int64_t num_parameter_values(std::int64_t num_class = 10,
                                           std::int64_t num_channel = 1);

 private:
  nn::Conv2d* conv1_;
  nn::Conv2d* conv2_;
  nn::Dense* fc1_;
  nn::Dense* fc2_;
  nn::Dense* fc3_;
  nn::ReLU* relu_;
  nn::MaxPool2d* max_pool2d_;
  nn::Flatten* flatten_;
};

}  // namespace loom::models
