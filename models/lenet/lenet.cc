#include "models/lenet/lenet.h"

#include <memory>

namespace loom::models {

LeNet5::LeNet5(std::int64_t num_class, std::int64_t num_channel) : nn::Cell("LeNet5") {
  conv1_ = &register_cell("conv1", std::make_shared<nn::Conv2d>(
                                       nn::Conv2dOptions(num_channel, 6, 5).pad_mode("valid")));
  conv2_ = &register_cell(
      "conv2", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(6, 16, 5).pad_mode("valid")));
  fc1_ = &register_cell("fc1", std::make_shared<nn::Dense>(16 * 5 * 5, 120));
  fc2_ = &register_cell("fc2", std::make_shared<nn::Dense>(120, 84));
  fc3_ = &register_cell("fc3", std::make_shared<nn::Dense>(84, num_class));
  relu_ = &register_cell("relu", std::make_shared<nn::ReLU>());
  max_pool2d_ = &register_cell("max_pool2d", std::make_shared<nn::MaxPool2d>(2, 2));
  flatten_ = &register_cell("flatten", std::make_shared<nn::Flatten>());
}

ops::Var LeNet5::construct(const std::vector<ops::Var>& inputs) {
  ops::Var x = (*max_pool2d_)((*relu_)((*conv1_)(inputs[0])));
  x = (*max_pool2d_)((*relu_)((*conv2_)(x)));
  x = (*flatten_)(x);
  x = (*relu_)((*fc1_)(x));
  x = (*relu_)((*fc2_)(x));
  return (*fc3_)(x);
}

std::int64_t LeNet5::num_parameter_values(std::int64_t num_class, std::int64_t num_channel) {
  return 6 * num_channel * 25 + 16 * 6 * 25 + (400 * 120 + 120) + (120 * 84 + 84) +
         (84 * num_class + num_class);
}

}  // namespace loom::models
