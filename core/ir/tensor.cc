// Tensor storage (aligned, zero-filled, shared) and the slow generic element access used by
// printing, parsing and tests.
#include "core/ir/tensor.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "core/ir/error.h"

namespace loom {

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) throw ValueError("shape: expected non-negative dims, got " + shape_to_string(shape));
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d) {
      throw ValueError("shape: expected an element count below 2^63, got " +
                       shape_to_string(shape));
    }
    n *= d;
  }
  return n;
}

std::string shape_to_string(const Shape& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

Storage::Storage(std::size_t nbytes) : nbytes_(nbytes) {
  const std::size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  data_ = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (!data_) throw std::bad_alloc();
  std::memset(data_, 0, rounded == 0 ? kAlignment : rounded);
}

Storage::Storage(void* data, std::size_t nbytes, Device device, Release release)
    : data_(data), nbytes_(nbytes), device_(device), release_(std::move(release)), owned_(false) {}

Storage::~Storage() {
  if (owned_) {
    std::free(data_);
  } else if (release_) {
    release_(data_);
  }
}

std::shared_ptr<Storage> Storage::wrap(void* data, std::size_t nbytes, Device device,
                                       std::shared_ptr<const void> owner) {
  return std::make_shared<Storage>(data, nbytes, device,
                                   [owner = std::move(owner)](void*) mutable { owner.reset(); });
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  numel_ = shape_numel(shape_);
  const std::size_t elem = dtype_size(dtype_);
  if (static_cast<std::uint64_t>(numel_) > std::numeric_limits<std::size_t>::max() / elem / 2) {
    throw ValueError("Tensor: expected a size that fits in memory, got " +
                     shape_to_string(shape_));
  }
  storage_ = std::make_shared<Storage>(static_cast<std::size_t>(numel_) * elem);
}

Tensor Tensor::from_doubles(DType dtype, Shape shape, const std::vector<double>& values) {
  Tensor t(dtype, std::move(shape));
  t.check_size(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) t.set(static_cast<std::int64_t>(i), values[i]);
  return t;
}

Tensor Tensor::scalar(DType dtype, double value) { return from_doubles(dtype, {}, {value}); }

std::int64_t Tensor::dim(std::int64_t axis) const {
  const std::int64_t r = rank();
  if (axis < -r || axis >= r) {
    throw ValueError("Tensor::dim: expected an axis in [" + std::to_string(-r) + ", " +
                     std::to_string(r) + "), got " + std::to_string(axis));
  }
  return shape_[static_cast<std::size_t>(axis < 0 ? axis + r : axis)];
}

void* Tensor::raw_data() {
  if (!storage_) throw ValueError("Tensor: expected a defined tensor, got an undefined one");
  return static_cast<char*>(storage_->data()) + offset_;
}

const void* Tensor::raw_data() const {
  if (!storage_) throw ValueError("Tensor: expected a defined tensor, got an undefined one");
  return static_cast<const char*>(storage_->data()) + offset_;
}

Tensor Tensor::view(std::shared_ptr<Storage> storage, std::size_t offset, DType dtype,
                    Shape shape) {
  Tensor t;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  if (!storage || offset > storage->nbytes() || t.nbytes() > storage->nbytes() - offset) {
    throw InternalError("Tensor::view: expected " + std::to_string(t.nbytes()) +
                        " bytes at offset " + std::to_string(offset) + " to fit the storage, got " +
                        std::to_string(storage ? storage->nbytes() : 0) + " bytes");
  }
  t.storage_ = std::move(storage);
  t.offset_ = offset;
  return t;
}

void Tensor::check_dtype(DType requested) const {
  if (requested != dtype_) {
    throw TypeError("Tensor::data: expected " + std::string(dtype_name(requested)) +
                    " to match the tensor, got a " + std::string(dtype_name(dtype_)) +
                    " tensor");
  }
}

void Tensor::check_host(const char* what) const {
  if (storage_ && !storage_->is_host()) {
    throw TypeError(std::string("Tensor::") + what + ": expected a host (CPU) tensor, got a " +
                    std::string(device_name(storage_->device())) +
                    " tensor (copy it to the host first)");
  }
}

void Tensor::check_size(std::size_t count) const {
  if (static_cast<std::int64_t>(count) != numel_) {
    throw ValueError("Tensor: expected " + std::to_string(numel_) + " values for shape " +
                     shape_to_string(shape_) + ", got " + std::to_string(count));
  }
}

double Tensor::get(std::int64_t i) const {
  check_host("get");
  const void* p = raw_data();
  switch (dtype_) {
    case DType::kFloat32: return static_cast<const float*>(p)[i];
    case DType::kFloat64: return static_cast<const double*>(p)[i];
    case DType::kFloat16: return half_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::kBFloat16: return bfloat16_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::kInt32: return static_cast<const std::int32_t*>(p)[i];
    case DType::kInt64: return static_cast<double>(static_cast<const std::int64_t*>(p)[i]);
    case DType::kUInt8: return static_cast<const std::uint8_t*>(p)[i];
    case DType::kBool: return static_cast<const std::uint8_t*>(p)[i] != 0 ? 1.0 : 0.0;
  }
  return 0;
}

namespace {
// Saturating double → integer conversion: NaN becomes 0, out-of-range values clamp, so that a
// bad value never reaches undefined behaviour.
template <typename Int>
Int saturate(double v) {
  if (std::isnan(v)) return 0;
  constexpr double lo = static_cast<double>(std::numeric_limits<Int>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<Int>::max());
  if (v <= lo) return std::numeric_limits<Int>::min();
  if (v >= hi) return std::numeric_limits<Int>::max();
  return static_cast<Int>(v);
}
}  // namespace

void Tensor::set(std::int64_t i, double v) {
  check_host("set");
  void* p = raw_data();
  switch (dtype_) {
    case DType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::kFloat64: static_cast<double*>(p)[i] = v; break;
    case DType::kFloat16:
      static_cast<std::uint16_t*>(p)[i] = float_to_half(static_cast<float>(v));
      break;
    case DType::kBFloat16:
      static_cast<std::uint16_t*>(p)[i] = float_to_bfloat16(static_cast<float>(v));
      break;
    case DType::kInt32: static_cast<std::int32_t*>(p)[i] = saturate<std::int32_t>(v); break;
    case DType::kInt64: static_cast<std::int64_t*>(p)[i] = saturate<std::int64_t>(v); break;
    case DType::kUInt8: static_cast<std::uint8_t*>(p)[i] = saturate<std::uint8_t>(v); break;
    case DType::kBool: static_cast<std::uint8_t*>(p)[i] = v != 0 ? 1 : 0; break;
  }
}

std::vector<double> Tensor::to_doubles() const {
  std::vector<double> out(static_cast<std::size_t>(numel_));
  for (std::int64_t i = 0; i < numel_; ++i) out[static_cast<std::size_t>(i)] = get(i);
  return out;
}

Tensor Tensor::clone() const {
  if (!defined()) return Tensor();
  check_host("clone");
  Tensor t(dtype_, shape_);
  std::memcpy(t.raw_data(), raw_data(), nbytes());
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  if (shape_numel(shape) != numel_) {
    throw ShapeError("Tensor::reshape: expected a shape of " + std::to_string(numel_) +
                     " elements, got " + shape_to_string(shape));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

bool Tensor::bitwise_equal(const Tensor& other) const {
  if (defined() != other.defined()) return false;
  if (!defined()) return true;
  check_host("bitwise_equal");
  other.check_host("bitwise_equal");
  return dtype_ == other.dtype_ && shape_ == other.shape_ &&
         std::memcmp(raw_data(), other.raw_data(), nbytes()) == 0;
}

std::string Tensor::describe() const {
  if (!defined()) return "Tensor(undefined)";
  std::string s = "Tensor[" + std::string(dtype_name(dtype_)) + "]" + shape_to_string(shape_);
  if (!is_host()) s += " on " + std::string(device_name(device()));
  return s;
}

}  // namespace loom
