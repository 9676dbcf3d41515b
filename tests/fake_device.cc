// tests/fake_device.h: a guarded fake GPU for tests.
#include "tests/fake_device.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "core/ir/error.h"

namespace loom::testing {
namespace {

FakeDevice* g_device = nullptr;
std::atomic<long> g_launches{0};

// The CPU kernels the fake device launches, by slot; guarded<I> launches slot I with the memory
// open. (A Kernel is a plain function pointer: one wrapper per slot.)
constexpr std::size_t kMaxKernels = 2048;
std::array<backend::Kernel, kMaxKernels> g_cpu_kernels{};

// Launches slot i with the memory open; while a graph is recorded, keeps the launch (with the same
// buffers) for the replay instead.
void run_guarded(std::size_t i, const backend::KernelContext& k) {
  if (g_device->recording()) {
    g_device->keep([i, ins = std::vector<Tensor>(k.inputs.begin(), k.inputs.end()),
                    outs = std::vector<Tensor>(k.outputs.begin(), k.outputs.end()),
                    prim = &k.prim, exec = &k.exec, prepared = k.prepared,
                    workspace = k.workspace, bytes = k.workspace_bytes]() mutable {
      backend::KernelContext c{*prim, ins, outs, *exec, prepared, workspace, bytes};
      run_guarded(i, c);
    });
    return;
  }
  FakeDevice::Access open(*g_device);
  g_launches.fetch_add(1, std::memory_order_relaxed);
  g_cpu_kernels[i](k);
}

// One plain function per slot (a Kernel is a function pointer), each only naming its slot: the
// work is run_guarded's, compiled once.
template <std::size_t I>
void guarded(const backend::KernelContext& k) {
  run_guarded(I, k);
}

template <std::size_t... I>
constexpr std::array<backend::Kernel, sizeof...(I)> make_wrappers(std::index_sequence<I...>) {
  return {&guarded<I>...};
}
constexpr std::array<backend::Kernel, kMaxKernels> kWrappers =
    make_wrappers(std::make_index_sequence<kMaxKernels>{});

void write_err(const char* s) {
  const ssize_t ignored = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)ignored;
}

// A host access to guarded device memory: said clearly, with a backtrace, then the default action
// (the faulting instruction runs again and kills the process).
void on_segv(int sig, siginfo_t* info, void*) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "\n*** fake device: segmentation fault at address %p: a host access to device "
                "memory outside a kernel or a copy? (a missing backend::to_host / to_device)\n",
                info ? info->si_addr : nullptr);
  write_err(buf);
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  ::signal(sig, SIG_DFL);
}

std::size_t page_size() {
  static const std::size_t p = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

}  // namespace

namespace {

class Recording final : public backend::RecordedWork {
 public:
  Recording(std::vector<std::function<void()>> work, std::atomic<long>& replays)
      : work_(std::move(work)), replays_(replays) {}
  void replay() override {
    ++replays_;
    for (auto& w : work_) w();
  }

 private:
  std::vector<std::function<void()>> work_;
  std::atomic<long>& replays_;
};

}  // namespace

std::unique_ptr<backend::RecordedWork> FakeDevice::record(const std::function<void()>& queue) {
  if (!record_) return nullptr;
  kept_.clear();
  recording_ = true;
  try {
    queue();
  } catch (...) {
    recording_ = false;
    kept_.clear();
    return nullptr;
  }
  recording_ = false;
  ++recordings_;
  return std::make_unique<Recording>(std::move(kept_), replays_);
}

FakeDevice::FakeDevice() {
  const char* env = std::getenv("LOOM_FAKE_DEVICE_GUARD");
  guard_ = !(env && std::strcmp(env, "0") == 0);
  const char* rec = std::getenv("LOOM_FAKE_DEVICE_RECORD");
  record_ = !(rec && std::strcmp(rec, "0") == 0);
  const std::vector<const backend::KernelDef*> all = backend::cpu_backend().kernels().all();
  if (all.size() > kMaxKernels) {
    throw InternalError("FakeDevice: the CPU backend has " + std::to_string(all.size()) +
                        " kernels, more than the " + std::to_string(kMaxKernels) + " slots");
  }
  for (std::size_t i = 0; i < all.size(); ++i) {
    const backend::KernelDef& k = *all[i];
    // The CPU's communication kernels (there when parallel::init ran first) are not a device's:
    // a device gets parallel/'s host-staged ones (register_device_comm_kernels).
    if (k.op.rfind("AllReduce", 0) == 0) continue;
    g_cpu_kernels[i] = k.run;
    backend::KernelDef& mine = kernels_.add(k.op, k.dtype, k.run);
    mine = k;
    mine.run = kWrappers[i];
  }
  if (guard_) {
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
  }
  g_device = this;
}

FakeDevice::~FakeDevice() = default;

void FakeDevice::open() {
  std::lock_guard<std::mutex> lock(mu_);
  if (depth_++ == 0 && guard_) {
    for (const auto& [p, n] : live_) ::mprotect(p, n, PROT_READ | PROT_WRITE);
  }
}

void FakeDevice::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--depth_ == 0 && guard_) {
    for (const auto& [p, n] : live_) ::mprotect(p, n, PROT_NONE);
  }
}

std::shared_ptr<Storage> FakeDevice::allocate(std::size_t bytes) {
  const std::size_t page = page_size();
  const std::size_t length = std::max<std::size_t>(1, (bytes + page - 1) / page) * page;
  std::lock_guard<std::mutex> lock(mu_);
  const int prot = guard_ && depth_ == 0 ? PROT_NONE : PROT_READ | PROT_WRITE;
  void* p = ::mmap(nullptr, length, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  live_.emplace(p, length);
  live_bytes_ += length;
  ++allocations_;
  return std::make_shared<Storage>(p, bytes, Device::kCUDA, [this](void* q) { release(q); });
}

void FakeDevice::release(void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) return;
  ::munmap(p, it->second);
  live_bytes_ -= it->second;
  live_.erase(it);
}

void FakeDevice::copy_from_host(void* dst, const void* host_src, std::size_t bytes) {
  if (recording_) {
    keep([this, dst, host_src, bytes] { copy_from_host(dst, host_src, bytes); });
    return;
  }
  Access open(*this);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++to_device_;
  }
  if (bytes) std::memcpy(dst, host_src, bytes);
}

void FakeDevice::copy_to_host(void* host_dst, const void* src, std::size_t bytes) {
  Access open(*this);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++to_host_;
  }
  if (bytes) std::memcpy(host_dst, src, bytes);
}

void FakeDevice::copy(void* dst, const void* src, std::size_t bytes) {
  if (recording_) {
    keep([this, dst, src, bytes] { copy(dst, src, bytes); });
    return;
  }
  Access open(*this);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++device_copies_;
  }
  if (bytes) std::memmove(dst, src, bytes);
}

void FakeDevice::fill_zero(void* dst, std::size_t bytes) {
  if (recording_) {
    keep([this, dst, bytes] { fill_zero(dst, bytes); });
    return;
  }
  Access open(*this);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++zero_fills_;
  }
  if (bytes) std::memset(dst, 0, bytes);
}

class FakeUploader final : public backend::Uploader {
 public:
  explicit FakeUploader(FakeDevice& d) : d_(d) {}
  std::vector<Tensor> upload(std::span<const Tensor> host) override {
    std::vector<std::shared_ptr<Storage>>& slot = slots_[next_];
    next_ ^= 1;
    slot.resize(host.size());
    std::vector<Tensor> out;
    for (std::size_t i = 0; i < host.size(); ++i) {
      if (backend::reuse_or_allocate(slot[i], host[i].nbytes(), d_)) {
        std::lock_guard<std::mutex> lock(d_.mu_);
        ++d_.upload_allocations_;
      }
      d_.copy_from_host(slot[i]->data(), host[i].raw_data(), host[i].nbytes());
      out.push_back(Tensor::view(slot[i], 0, host[i].dtype(), host[i].shape()));
    }
    std::lock_guard<std::mutex> lock(d_.mu_);
    ++d_.uploads_;
    return out;
  }

 private:
  FakeDevice& d_;
  std::vector<std::shared_ptr<Storage>> slots_[2];
  int next_ = 0;
};

std::unique_ptr<backend::Uploader> FakeDevice::make_uploader() {
  return std::make_unique<FakeUploader>(*this);
}

long FakeDevice::uploads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return uploads_;
}
long FakeDevice::upload_allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return upload_allocations_;
}

long FakeDevice::allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocations_;
}
long FakeDevice::to_device() const {
  std::lock_guard<std::mutex> lock(mu_);
  return to_device_;
}
long FakeDevice::to_host() const {
  std::lock_guard<std::mutex> lock(mu_);
  return to_host_;
}
long FakeDevice::device_copies() const {
  std::lock_guard<std::mutex> lock(mu_);
  return device_copies_;
}
long FakeDevice::zero_fills() const {
  std::lock_guard<std::mutex> lock(mu_);
  return zero_fills_;
}
long FakeDevice::launches() const { return g_launches.load(); }
std::size_t FakeDevice::live_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_bytes_;
}

FakeDevice& fake_device() {
  static FakeDevice* d = [] {
    auto* dev = new FakeDevice();  // never destroyed: tensors may outlive static destruction
    backend::register_backend(*dev);
    return dev;
  }();
  return *d;
}

}  // namespace loom::testing
