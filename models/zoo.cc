#include "models/zoo.h"

#include "core/ir/error.h"
#include "models/registry.h"

namespace loom::models {
namespace {

std::vector<Recipe> make_recipes() {
  std::vector<Recipe> r;
  register_lenet(r);
  register_resnet(r);
  return r;
}

}  // namespace

const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> all = make_recipes();
  return all;
}

const Recipe& recipe(const std::string& name) {
  std::string known;
  for (const Recipe& r : recipes()) {
    if (r.name == name) return r;
    known += (known.empty() ? "" : ", ") + r.name;
  }
  throw ValueError("models::recipe: expected a model in (" + known + "), got '" + name + "'");
}

}  // namespace loom::models
