// Each model's registration function, called by models/zoo.cc in this order (registration is
// explicit: a static library drops self-registering objects). A new model adds its function here
// and one call in zoo.cc.
#pragma once

#include <vector>

#include "models/zoo.h"

namespace loom::models {

void register_lenet(std::vector<Recipe>& recipes);  // models/lenet/recipe.cc
void register_resnet(std::vector<Recipe>& recipes);  // models/resnet/recipe.cc

}  // namespace loom::models
