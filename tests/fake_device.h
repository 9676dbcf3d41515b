// A test double for a GPU, for test binaries only (the `loom` command never links it): a backend
// registered as Device::kCUDA whose kernels are every CPU kernel and whose memory is host memory
// that the host may not touch outside the backend's own work.
//
//   testing::FakeDevice& dev = testing::fake_device();     // registers it (once per process)
//   nn::set_context_device(Device::kCUDA);                  // now finds the fake device
//   Tensor d = backend::to_device(host_tensor, dev);
//   Tensor h = backend::to_host(d);
//
// What makes it a useful stand-in for a real GPU: every storage it allocates says Device::kCUDA,
// so the Tensor host accessors (get, set, to_doubles, clone...) throw TypeError on it; and, with
// the guard on (the default), the memory itself is mapped PROT_NONE except while one of the
// backend's kernels, copies or fills runs. A host read or write through raw_data() / data<T>()
// anywhere else — what would read garbage or crash on a GPU — is a segmentation fault here, and
// the fault handler prints the address and a backtrace before the process dies. LOOM_FAKE_DEVICE_
// GUARD=0 in the environment turns the guard off (plain host memory; the accessors still throw).
//
// Kernels: a copy of each KernelDef of the CPU backend at construction (with its prepare step,
// workspace and in-place facts), its launch wrapped to open the memory for the launch. The
// execution context is a CPU context (the thread pool), which the CPU kernels expect. Kernels the
// CPU registry gains later, and parallel/'s communication kernels, are not copied (a device
// gets parallel/'s host-staged ones).
//
// Recording (Backend::record, what a CUDA graph is to the CUDA backend): while `queue` runs, the
// launches, copies and fills are kept, with the tensors and pointers they were given, instead of
// being done; replay() does them again in order on those same buffers. So a runtime that replays
// a recording with the wrong buffers (a new batch not copied in, a donated parameter not copied
// back) computes wrong values here as it would on a GPU. LOOM_FAKE_DEVICE_RECORD=0: no recording.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu.h"

namespace loom::testing {

class FakeDevice final : public backend::Backend {
 public:
  FakeDevice();
  ~FakeDevice() override;

  Device device() const override { return Device::kCUDA; }
  std::shared_ptr<Storage> allocate(std::size_t bytes) override;
  void copy_from_host(void* dst, const void* host_src, std::size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void fill_zero(void* dst, std::size_t bytes) override;
  backend::ExecutionContext& context() override { return context_; }
  std::string describe() const override { return "fake CUDA device (guarded host memory)"; }
  std::unique_ptr<backend::RecordedWork> record(const std::function<void()>& queue) override;
  // Two slots of buffers taking turns, as the CUDA backend's (without its pinned buffers and copy
  // stream: the copies are done at once), so the rule for reusing a slot meets recordings here.
  std::unique_ptr<backend::Uploader> make_uploader() override;

  // While a record() runs: the work is kept, not done (the kernels' wrappers ask).
  bool recording() const { return recording_; }
  void keep(std::function<void()> work) { kept_.push_back(std::move(work)); }
  long recordings() const { return recordings_; }
  long replays() const { return replays_; }

  bool guarded() const { return guard_; }

  // Counts of the backend's work since construction.
  long allocations() const;
  long to_device() const;
  long to_host() const;
  long device_copies() const;
  long zero_fills() const;
  long launches() const;
  long uploads() const;                // Uploader::upload calls
  long upload_allocations() const;     // new slot buffers the uploaders took
  // Bytes of this device's memory alive now.
  std::size_t live_bytes() const;

  // Opens the memory to the host for the lifetime of the scope (nested and concurrent scopes
  // count: the memory closes when the last one ends). The kernels and copies use it.
  class Access {
   public:
    explicit Access(FakeDevice& d) : d_(d) { d_.open(); }
    ~Access() { d_.close(); }
    Access(const Access&) = delete;
    Access& operator=(const Access&) = delete;

   private:
    FakeDevice& d_;
  };

 private:
  void open();
  void close();
  void release(void* p);

  bool guard_ = true;
  bool record_ = true;
  bool recording_ = false;
  std::vector<std::function<void()>> kept_;
  long recordings_ = 0;
  std::atomic<long> replays_{0};
  mutable std::mutex mu_;
  int depth_ = 0;
  std::unordered_map<void*, std::size_t> live_;  // mapping → its length
  std::size_t live_bytes_ = 0;
  long allocations_ = 0, to_device_ = 0, to_host_ = 0, device_copies_ = 0, zero_fills_ = 0,
       launches_ = 0, uploads_ = 0, upload_allocations_ = 0;
  friend class FakeUploader;
  backend::cpu::CpuContext context_;
};

// The process's fake device, made and registered as the CUDA backend on first use (replacing a
// real CUDA backend's registration for the rest of the process).
FakeDevice& fake_device();

}  // namespace loom::testing
