/// \file
/// Tensor: a dense, contiguous, row-major tensor with reference-counted storage.
///
/// A Tensor is both the value held by a ValueNode in the IR and what users hold. Copying a Tensor
/// is cheap and shares the storage (as torch.Tensor does); clone() makes a deep copy. Storage made
/// here is host memory, 64-byte aligned so kernels may use aligned vector loads, and zero-filled.
/// A backend makes storage on its device (Backend::allocate), and outside memory (a NumPy array,
/// a DLPack capsule) can be wrapped without a copy (Storage::wrap). The element accessors that
/// read or write values on the host (get, set, to_doubles, clone, bitwise_equal, from_*) need host
/// storage and throw TypeError for a device tensor; raw_data() and data<T>() give any tensor's
/// address (a device address for a device tensor, for that device's kernels).
///
/// ```
/// Tensor t(DType::kFloat32, {2, 3});
/// t.data<float>()[0] = 1.5f;
/// Tensor u = Tensor::from_vector<float>({2}, {1.f, 2.f});
/// ```
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/ir/device.h"
#include "core/ir/dtype.h"

namespace loom {

/// A tensor's dims, outermost first.
using Shape = std::vector<std::int64_t>;

/// Number of elements of a shape (1 for rank 0). Throws ValueError for a negative dim or overflow.
std::int64_t shape_numel(const Shape& shape);

/// "(2, 3)"; "()" for a scalar.
std::string shape_to_string(const Shape& shape);

/// One block of memory on one device, shared by the Tensors that view it. Either an aligned host
/// allocation of its own, or memory someone else made, given back by a release function when the
/// last Tensor lets go (a backend's free, or dropping the owner of wrapped outside memory).
class Storage {
 public:
  /// Gives back memory the storage does not own; called with the data pointer.
  using Release = std::function<void(void*)>;

  /// nbytes of zero-filled host memory, 64-byte aligned.
  explicit Storage(std::size_t nbytes);
  /// Takes `data` (nbytes on `device`); release(data) runs in the destructor (may be empty).
  Storage(void* data, std::size_t nbytes, Device device, Release release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  /// Outside memory viewed without a copy: `owner` (the NumPy array, the DLPack tensor...) is kept
  /// alive until the storage goes.
  static std::shared_ptr<Storage> wrap(void* data, std::size_t nbytes, Device device,
                                       std::shared_ptr<const void> owner);

  /// The start of the memory (a device address for device storage).
  ///@{
  void* data() { return data_; }
  const void* data() const { return data_; }
  ///@}
  /// The size in bytes.
  std::size_t nbytes() const { return nbytes_; }
  /// The device the memory is on.
  Device device() const { return device_; }
  /// True for host (kCPU) memory.
  bool is_host() const { return device_ == Device::kCPU; }

  /// The alignment in bytes of the storage's own host allocations.
  static constexpr std::size_t kAlignment = 64;

 private:
  void* data_;
  std::size_t nbytes_;
  Device device_ = Device::kCPU;
  Release release_;  ///< empty for the storage's own host allocation (freed with std::free)
  bool owned_ = true;
};

/// The DType of a C++ element type: `DTypeOf<float>::value == DType::kFloat32`. Defined for
/// float, double, std::int32_t, std::int64_t, std::uint8_t and bool (Float16 and BFloat16 have no
/// C++ element type here).
template <typename T>
struct DTypeOf;
/// float is Float32.
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; /**< The DType. */ };
/// double is Float64.
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; /**< The DType. */ };
/// std::int32_t is Int32.
template <> struct DTypeOf<std::int32_t> { static constexpr DType value = DType::kInt32; /**< The DType. */ };
/// std::int64_t is Int64.
template <> struct DTypeOf<std::int64_t> { static constexpr DType value = DType::kInt64; /**< The DType. */ };
/// std::uint8_t is UInt8.
template <> struct DTypeOf<std::uint8_t> { static constexpr DType value = DType::kUInt8; /**< The DType. */ };
/// bool is Bool (one byte per element, 0 or 1).
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; /**< The DType. */ };

/// A dense, contiguous, row-major tensor: a dtype, a shape and a view of reference-counted
/// Storage. Copies share the storage; clone() makes a deep copy.
class Tensor {
 public:
  /// An undefined tensor (no storage); defined() is false.
  Tensor() = default;
  /// A zero-filled tensor in new host storage. Throws ValueError for a negative dim or a size
  /// that cannot fit in memory.
  Tensor(DType dtype, Shape shape);

  /// A tensor holding `values` (converted to dtype; bool is value != 0). Throws ValueError when
  /// values.size() differs from the shape's element count.
  static Tensor from_doubles(DType dtype, Shape shape, const std::vector<double>& values);
  /// A tensor of dtype `DTypeOf<T>::value` holding `values`, in new host storage. Throws
  /// ValueError when values.size() differs from the shape's element count.
  template <typename T>
  static Tensor from_vector(Shape shape, const std::vector<T>& values);
  /// A rank-0 tensor.
  static Tensor scalar(DType dtype, double value);

  /// True when the tensor has storage (false for a default-constructed one).
  bool defined() const { return storage_ != nullptr; }
  /// The device of the storage (kCPU for an undefined tensor).
  Device device() const { return storage_ ? storage_->device() : Device::kCPU; }
  /// True when the storage is host memory (also for an undefined tensor).
  bool is_host() const { return device() == Device::kCPU; }
  /// The element type.
  DType dtype() const { return dtype_; }
  /// The dims, outermost first.
  const Shape& shape() const { return shape_; }
  /// The number of dims (0 for a scalar).
  std::int64_t rank() const { return static_cast<std::int64_t>(shape_.size()); }
  /// The size of dim `axis`; negative axes count from the end. Throws ValueError when `axis` is
  /// not in [-rank(), rank()).
  std::int64_t dim(std::int64_t axis) const;
  /// The number of elements (1 for a scalar).
  std::int64_t numel() const { return numel_; }
  /// The size of the elements in bytes: numel() * dtype_size(dtype()).
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }

  /// The address of the first element (a device address for a device tensor). Throws
  /// ValueError for an undefined tensor.
  ///@{
  void* raw_data();
  const void* raw_data() const;
  ///@}
  /// Typed access; throws TypeError when T does not match dtype(). Float16/BFloat16 data is
  /// reached through raw_data() as uint16_t bits, or through get/set below.
  ///@{
  template <typename T>
  T* data();
  template <typename T>
  const T* data() const;
  ///@}

  /// Element i (flat index) converted to or from double, for any dtype. Slow; for tests, printing
  /// and parsing, never for kernels. Host tensors only (TypeError otherwise); `i` is not range
  /// checked. For integer dtypes set() truncates toward zero and saturates (NaN becomes 0); for
  /// Bool it stores value != 0.
  ///@{
  double get(std::int64_t i) const;
  void set(std::int64_t i, double value);
  ///@}
  /// Every element converted to double, in flat order (host tensors only, TypeError otherwise).
  std::vector<double> to_doubles() const;

  /// A deep copy in new host storage (host tensors only; a backend copies device tensors).
  Tensor clone() const;
  /// A view of the same storage with another shape of equal element count; throws ShapeError
  /// when the counts differ.
  Tensor reshape(Shape shape) const;
  /// A tensor over `storage` starting `offset` bytes in (a multiple of 64 keeps kernels' aligned
  /// loads valid). Used by the runtime to place many tensors in one planned arena. Throws
  /// InternalError when the tensor would not fit in the storage.
  static Tensor view(std::shared_ptr<Storage> storage, std::size_t offset, DType dtype,
                     Shape shape);
  /// True when both share one storage.
  bool shares_storage_with(const Tensor& other) const { return storage_ == other.storage_; }
  /// The storage (null for an undefined tensor).
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  /// The number of owners of the storage (Tensors and other holders); 0 for an undefined tensor.
  long use_count() const { return storage_.use_count(); }

  /// Same dtype, shape and bytes (two undefined tensors are equal). Host tensors only
  /// (TypeError otherwise).
  bool bitwise_equal(const Tensor& other) const;

  /// "Tensor[Float32](2, 3)" — a short description, never the values; a device tensor's ends
  /// with " on CUDA", an undefined tensor is "Tensor(undefined)".
  std::string describe() const;

 private:
  void check_dtype(DType requested) const;
  void check_host(const char* what) const;  ///< TypeError for a device tensor
  void check_size(std::size_t count) const;  ///< count == numel(), else ValueError

  std::shared_ptr<Storage> storage_;
  std::size_t offset_ = 0;  ///< bytes from the start of storage_
  DType dtype_ = DType::kFloat32;
  Shape shape_;
  std::int64_t numel_ = 0;
};

template <typename T>
Tensor Tensor::from_vector(Shape shape, const std::vector<T>& values) {
  Tensor t(DTypeOf<T>::value, std::move(shape));
  t.check_size(values.size());
  T* out = t.data<T>();
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return t;
}

template <typename T>
T* Tensor::data() {
  check_dtype(DTypeOf<T>::value);
  return static_cast<T*>(raw_data());
}

template <typename T>
const T* Tensor::data() const {
  check_dtype(DTypeOf<T>::value);
  return static_cast<const T*>(raw_data());
}

}  // namespace loom
