// Helpers shared by the data/ sources; not part of the public API.
#pragma once

#include <cstdint>
#include <string>

#include "core/ir/tensor.h"
#include "data/dataset.h"

namespace loom::data::detail {

// Throws ValueError "<stage>: row <i> out of range [0, <size>)" unless 0 <= i < size.
void check_row(const Dataset& d, std::int64_t i);

// A copy of t[i] along axis 0 (shape t.shape()[1:]) with its own storage.
Tensor slice_row(const Tensor& t, std::int64_t i);

}  // namespace loom::data::detail
