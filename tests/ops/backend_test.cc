#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/backend.h"
#include "backends/gpu/cuda_backend.h"
#include "backends/eager.h"
#include "core/ir/error.h"

namespace loom::backend {
namespace {

TEST(Backend, CpuAllocatesAlignedAndCopies) {
  Backend& b = cpu_backend();
  EXPECT_EQ(b.device(), Device::kCPU);
  EXPECT_EQ(b.name(), "CPU");
  std::vector<float> host{1, 2, 3, 4, 5};
  std::shared_ptr<Storage> buf = b.allocate(host.size() * sizeof(float));
  EXPECT_EQ(buf->device(), Device::kCPU);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buf->data()) % 64, 0u);
  b.copy_from_host(buf->data(), host.data(), host.size() * sizeof(float));
  std::shared_ptr<Storage> buf2 = b.allocate(host.size() * sizeof(float));
  b.copy(buf2->data(), buf->data(), host.size() * sizeof(float));
  std::vector<float> back(host.size());
  b.copy_to_host(back.data(), buf2->data(), back.size() * sizeof(float));
  EXPECT_EQ(back, host);
  b.fill_zero(buf2->data(), 2 * sizeof(float));
  b.copy_to_host(back.data(), buf2->data(), back.size() * sizeof(float));
  EXPECT_EQ(back, (std::vector<float>{0, 0, 3, 4, 5}));
  std::shared_ptr<Storage> empty = b.allocate(0);
  EXPECT_NE(empty->data(), nullptr);
}

// Outside memory (a NumPy array, a DLPack tensor) is viewed without a copy and its owner lives
// as long as any tensor over it.
TEST(Backend, WrappedStorageKeepsItsOwnerAlive) {
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  std::weak_ptr<std::vector<float>> watch = owner;
  Tensor t = Tensor::view(
      Storage::wrap(owner->data(), owner->size() * sizeof(float), Device::kCPU, owner), 0,
      DType::kFloat32, {2, 3});
  owner.reset();
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ(t.get(5), 6.0);
  t.data<float>()[0] = 7;
  EXPECT_EQ(watch.lock()->at(0), 7.0f);  // the same memory
  t = Tensor();
  EXPECT_TRUE(watch.expired());
}

// A tensor on a device is refused by the host-only accessors with a message naming the device;
// its address is still there for that device's kernels.
TEST(Backend, DeviceTensorsRefuseHostAccess) {
  auto owner = std::make_shared<std::vector<float>>(4, 1.0f);
  Tensor t = Tensor::view(
      Storage::wrap(owner->data(), 4 * sizeof(float), Device::kCUDA, owner), 0, DType::kFloat32,
      {4});
  EXPECT_EQ(t.device(), Device::kCUDA);
  EXPECT_NE(t.data<float>(), nullptr);
  EXPECT_EQ(t.describe(), "Tensor[Float32](4) on CUDA");
  try {
    t.get(0);
    FAIL();
  } catch (const TypeError& e) {
    EXPECT_STREQ(e.what(), "Tensor::get: expected a host (CPU) tensor, got a CUDA tensor (copy it "
                           "to the host first)");
  }
  EXPECT_THROW(t.clone(), TypeError);
  EXPECT_THROW(t.to_doubles(), TypeError);
}

TEST(Backend, AMissingBackendIsAClearError) {
  // Without a GPU (this machine, CI) or without the toolkit, the reason comes with the error.
  if (find_backend(Device::kCUDA) != nullptr) GTEST_SKIP() << "this machine has a GPU";
  const std::string why = cuda_unavailable_reason();
  EXPECT_FALSE(why.empty());
  try {
    get_backend(Device::kCUDA);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "CUDA: expected a backend for this device, got none (" + why + ")");
  }
}

TEST(Backend, FindsRegisteredKernelsOnly) {
  Backend& b = cpu_backend();
  EXPECT_NE(b.find_kernel("ReLU", DType::kFloat32), nullptr);
  EXPECT_EQ(b.find_kernel("ReLU", DType::kBool), nullptr);
  EXPECT_EQ(b.find_kernel("NoSuchOp", DType::kFloat32), nullptr);
}

TEST(Backend, EagerCallWithoutAKernelIsAClearError) {
  // Inference accepts UInt8 for Abs, but no CPU kernel is registered for it.
  ir::Value x = ir::Value::tensor(Tensor(DType::kUInt8, {2}));
  try {
    run_op("Abs", {x});
    FAIL();
  } catch (const TypeError& e) {
    EXPECT_STREQ(e.what(), "Abs: expected a CPU kernel for UInt8, got none");
  }
}

}  // namespace
}  // namespace loom::backend
