// parallel::init / finalize, the world communicator, its communication thread and watchdog.
// Built with MPI when LOOM_HAVE_MPI is defined; otherwise every process is rank 0 of size 1.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "core/ir/error.h"
#include "parallel/parallel.h"

#ifdef LOOM_HAVE_MPI
#include <mpi.h>
#endif

namespace loom::parallel {

void register_comm_kernels();  // comm_kernels.cc

struct PendingReduce {
  std::int64_t id = 0;
  DType dtype = DType::kFloat32;
  std::int64_t count = 0;  // elements
  // The bucket, flattened (from the pool, uninitialised); the sum after the reduction (the
  // mean when `scaled`; otherwise wait() divides while copying out, saving a pass).
  struct Buffer {
    std::unique_ptr<char[]> data;
    std::size_t capacity = 0;
  } buf;
  std::size_t bytes = 0;
  bool scaled = false;
  bool mean = true, deterministic = false;
  bool done = false;
  std::string error;
};

struct Communicator::Impl {
  std::atomic<Communicator::TraceSink*> trace{nullptr};
  std::mutex mu;  // queue_, inflight_
  std::condition_variable cv;
  std::deque<std::shared_ptr<PendingReduce>> queue;  // not started yet, issue order
  std::map<std::int64_t, std::shared_ptr<PendingReduce>> inflight;
  std::thread thread;
  bool stop = false;
  std::mutex mpi_mu;  // every MPI call (MPI_THREAD_SERIALIZED)
  // Watchdog: when the current collective began (steady ns, 0 when none) and what it is.
  std::atomic<std::int64_t> busy_since{0};
  std::atomic<std::int64_t> busy_id{-1};
  std::thread watchdog;
  std::atomic<bool> watchdog_stop{false};
  double timeout = 60;
  bool we_initialised_mpi = false;
  // Staging buffers for reuse (steps repeat the same bucket sizes): no allocation, page fault or
  // zero-fill per reduction.
  std::mutex pool_mu;
  std::vector<PendingReduce::Buffer> pool;
  PendingReduce::Buffer take(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(pool_mu);
    std::size_t best = pool.size();
    for (std::size_t i = 0; i < pool.size(); ++i) {
      if (pool[i].capacity >= bytes && (best == pool.size() || pool[i].capacity < pool[best].capacity)) best = i;
    }
    if (best == pool.size()) return {std::unique_ptr<char[]>(new char[std::max<std::size_t>(bytes, 1)]), bytes};
    PendingReduce::Buffer b = std::move(pool[best]);
    pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(best));
    return b;
  }
  void give(PendingReduce::Buffer b) {
    std::lock_guard<std::mutex> lock(pool_mu);
    if (pool.size() < 64) pool.push_back(std::move(b));
  }
  // Peers on this host (rank, pid): the watchdog checks they are alive while a collective waits.
  std::vector<std::pair<int, long>> local_peers;
  // Peers on other hosts: where each listens (listen_for_probes), for the watchdog to ask
  // which ones still answer when a collective times out.
  struct RemotePeer {
    int rank;
    long pid;
    std::string host;
    int port;
    std::vector<std::uint32_t> addresses;  // IPv4, network byte order
  };
  std::vector<RemotePeer> remote_peers;
  int probe_fd = -1;  // this rank's listening socket (the kernel answers; nothing accepts)
};

namespace {

Communicator* g_world = nullptr;
bool g_initialized = false;
char g_signal_prefix[256] = "loom.parallel: rank ? got signal ";

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

#ifdef LOOM_HAVE_MPI
// Completes a non-blocking collective without keeping a core busy while a peer is late: MPI_Test
// in a loop (each call also progresses the collective) for the first kSpinNs, which covers a
// collective between ranks that arrive together, then one MPI_Test per kNap sleep. A rank waiting
// for a slow, stopped or hung peer uses a few percent of a core instead of all of it (Open MPI's
// blocking collectives poll without sleeping). Every collective goes through here.
// LOOM_PARALLEL_SPIN_MS (read once at init) sets the spinning time.
std::int64_t g_spin_ns = 20'000'000;  // 20 ms
constexpr std::chrono::microseconds kNap(500);
int wait_request(MPI_Request* req) {
  const std::int64_t start = now_ns();
  for (;;) {
    int done = 0;
    const int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || done) return rc;
    if (now_ns() - start > g_spin_ns) std::this_thread::sleep_for(kNap);
  }
}
#endif

std::string hostname() {
  char h[256] = {0};
  gethostname(h, sizeof h - 1);
  return h;
}

void on_signal(int sig) {
  // async-signal-safe: write(2) only.
  char num[16];
  int n = 0;
  int s = sig;
  char rev[16];
  do {
    rev[n++] = static_cast<char>('0' + s % 10);
    s /= 10;
  } while (s > 0 && n < 15);
  for (int i = 0; i < n; ++i) num[i] = rev[n - 1 - i];
  num[n] = '\n';
  ssize_t ignored = write(2, g_signal_prefix, std::strlen(g_signal_prefix));
  ignored = write(2, num, static_cast<std::size_t>(n + 1));
  (void)ignored;
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

std::string prefix(int rank) { return "loom.parallel: rank " + std::to_string(rank) + ": "; }

template <class T>
void finish_sum(T* out, const T* gathered, std::int64_t count, int n, bool mean) {
  // Rank order 0, 1, ..., n-1 for every element: the same bits on every rank, every run.
  for (std::int64_t i = 0; i < count; ++i) {
    T s = gathered[i];
    for (int r = 1; r < n; ++r) s += gathered[static_cast<std::int64_t>(r) * count + i];
    out[i] = mean ? s / static_cast<T>(n) : s;
  }
}

template <class T>
void copy_scaled(T* out, const T* x, std::int64_t count, int n) {
  const T d = static_cast<T>(n);
  for (std::int64_t i = 0; i < count; ++i) out[i] = x[i] / d;
}

#ifdef LOOM_HAVE_MPI
MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::kFloat32: return MPI_FLOAT;
    case DType::kFloat64: return MPI_DOUBLE;
    case DType::kInt64: return MPI_INT64_T;
    case DType::kInt32: return MPI_INT32_T;
    default: return MPI_BYTE;
  }
}
#endif

}  // namespace

// ---- the communication itself ----------------------------------------------------------------

namespace {

// steady_clock nanoseconds, the profiler's clock (ThreadPool::TraceSink's too).
std::int64_t trace_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Runs one reduction in the calling thread (the communication thread, or a waiter when overlap
// is off). Holds mpi_mu.
void reduce_now(Communicator& c, Communicator::Impl& im, PendingReduce& p,
                bool on_communication_thread) {
  const int n = c.size();
  if (n == 1) return;  // the mean over one rank is the value
#ifdef LOOM_HAVE_MPI
  std::lock_guard<std::mutex> lock(im.mpi_mu);
  im.busy_id = p.id;
  im.busy_since = now_ns();
  struct Report {  // reports the reduction to the trace sink, if any, when it ends
    Communicator::Impl& im;
    PendingReduce& p;
    bool comm;
    std::int64_t begin;
    ~Report() {
      if (Communicator::TraceSink* sink = im.trace.load(std::memory_order_acquire)) {
        sink->reduction(p.id, p.bytes, begin, trace_now_ns(), comm);
      }
    }
  } report{im, p, on_communication_thread, trace_now_ns()};
  const MPI_Datatype t = mpi_type(p.dtype);
  const int count = static_cast<int>(p.count);
  int rc;
  if (p.deterministic) {
    PendingReduce::Buffer g = im.take(p.bytes * static_cast<std::size_t>(n));
    char* gathered = g.data.get();
    MPI_Request req;
    rc = MPI_Iallgather(p.buf.data.get(), count, t, gathered, count, t, MPI_COMM_WORLD, &req);
    if (rc == MPI_SUCCESS) rc = wait_request(&req);
    if (rc == MPI_SUCCESS) {
      if (p.dtype == DType::kFloat32) {
        finish_sum(reinterpret_cast<float*>(p.buf.data.get()),
                   reinterpret_cast<const float*>(gathered), p.count, n, p.mean);
      } else {
        finish_sum(reinterpret_cast<double*>(p.buf.data.get()),
                   reinterpret_cast<const double*>(gathered), p.count, n, p.mean);
      }
      p.scaled = true;
    }
    im.give(std::move(g));
  } else {
    MPI_Request req;
    rc = MPI_Iallreduce(MPI_IN_PLACE, p.buf.data.get(), count, t, MPI_SUM, MPI_COMM_WORLD, &req);
    if (rc == MPI_SUCCESS) rc = wait_request(&req);
  }
  im.busy_since = 0;
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    c.abort(std::string(p.deterministic ? "MPI_Allgather" : "MPI_Allreduce") + " of all-reduce #" +
            std::to_string(p.id) + " failed: " + std::string(text, static_cast<std::size_t>(len)) +
            " (a peer rank has probably exited)");
  }
#endif
}

void comm_thread_main(Communicator* c, Communicator::Impl* im) {
  for (;;) {
    std::shared_ptr<PendingReduce> p;
    {
      std::unique_lock<std::mutex> lock(im->mu);
      im->cv.wait(lock, [&] { return im->stop || (c->overlap() && !im->queue.empty()); });
      if (im->queue.empty()) return;  // stop, nothing left
      p = im->queue.front();
    }
    reduce_now(*c, *im, *p, /*on_communication_thread=*/true);
    {
      std::lock_guard<std::mutex> lock(im->mu);
      im->queue.pop_front();
      p->done = true;
    }
    im->cv.notify_all();
  }
}

// The scheduler state of process `pid` on this host (/proc/PID/stat's third field: R running,
// S sleeping, T stopped, t traced, Z zombie, ...), or '?' when it cannot be read.
char process_state(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return '?';
  const std::size_t close = line.rfind(')');  // the command name may hold spaces and parentheses
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
}

// What the watchdog knows of the peers on this host when a collective times out: the ones that
// are stopped (SIGSTOP, a debugger) or zombies, named with their pids; "" when none is.
std::string local_peer_states(const Communicator::Impl& im) {
  std::string out;
  for (auto [r, pid] : im.local_peers) {
    const char state = process_state(pid);
    const char* what = state == 'T' ? "stopped" : state == 't' ? "stopped by a debugger"
                       : state == 'Z' ? "a zombie (exited)" : nullptr;
    if (what == nullptr) continue;
    out += std::string(out.empty() ? "" : "; ") + "rank " + std::to_string(r) + " (pid " +
           std::to_string(pid) + ") is " + what;
  }
  return out;
}

// This rank's answer to the watchdogs of other hosts: a TCP socket listening on every address,
// which nothing accepts (the kernel completes a connection while the process lives, whatever it
// is doing). Returns the socket and its port, or -1 where none can be made.
int listen_for_probes(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

// This host's IPv4 addresses, loopback left out (at most `max`).
std::vector<std::uint32_t> host_addresses(std::size_t max) {
  std::vector<std::uint32_t> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr && out.size() < max; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    out.push_back(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
  }
  freeifaddrs(list);
  return out;
}

std::string ipv4_text(std::uint32_t a) {
  char t[INET_ADDRSTRLEN] = {0};
  in_addr in{};
  in.s_addr = a;
  inet_ntop(AF_INET, &in, t, sizeof t);
  return t;
}

// Asks every peer on another host, all at once, whether it still answers on the network: a TCP
// connection to its probe socket at each of its addresses, for up to `seconds`. Names the ones
// that do not: "rank 2 (pid P, host H) does not answer on the network (10.77.0.3:41234: no reply
// within 2 s)", or "... refuses connections (...): its process has exited" when its host answers
// for it. "" when every peer answers.
std::string remote_peer_states(const Communicator::Impl& im, double seconds) {
  struct Try {
    std::size_t peer;
    std::uint32_t address;
    int fd;
    int result;  // 1 connected, 0 pending, -1 refused, -2 other error
  };
  std::vector<Try> tries;
  for (std::size_t p = 0; p < im.remote_peers.size(); ++p) {
    const auto& peer = im.remote_peers[p];
    for (std::uint32_t address : peer.addresses) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<std::uint16_t>(peer.port));
      a.sin_addr.s_addr = address;
      int result = 0;
      if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        result = 1;
      } else if (errno == ECONNREFUSED) {
        result = -1;
      } else if (errno != EINPROGRESS) {
        result = -2;
      }
      tries.push_back({p, address, fd, result});
    }
  }
  const std::int64_t deadline = now_ns() + static_cast<std::int64_t>(seconds * 1e9);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < tries.size(); ++i) {
      if (tries[i].result == 0) {
        fds.push_back({tries[i].fd, POLLOUT, 0});
        which.push_back(i);
      }
    }
    const std::int64_t left_ms = (deadline - now_ns()) / 1'000'000;
    if (fds.empty() || left_ms <= 0) break;
    if (poll(fds.data(), fds.size(), static_cast<int>(left_ms)) <= 0) continue;
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Try& t = tries[which[k]];
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(t.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      t.result = err == 0 ? 1 : err == ECONNREFUSED ? -1 : -2;
    }
  }
  std::string out;
  std::size_t silent = 0;
  for (std::size_t p = 0; p < im.remote_peers.size(); ++p) {
    const auto& peer = im.remote_peers[p];
    bool answered = false, refused = false;
    std::string where;
    for (const Try& t : tries) {
      if (t.peer != p) continue;
      answered |= t.result == 1;
      refused |= t.result == -1;
      where += std::string(where.empty() ? "" : ", ") + ipv4_text(t.address) + ":" +
               std::to_string(peer.port);
    }
    if (answered) continue;
    char within[32];
    std::snprintf(within, sizeof within, "%g", seconds);
    out += std::string(out.empty() ? "" : "; ") + "rank " + std::to_string(peer.rank) + " (pid " +
           std::to_string(peer.pid) + ", host " + peer.host + ") " +
           (refused ? "refuses connections (" + where + "): its process has exited"
                    : "does not answer on the network (" + (where.empty() ? "no address" : where) +
                          ": no reply within " + within + " s)");
    if (!refused) ++silent;
  }
  for (const Try& t : tries) close(t.fd);
  if (silent > 1 && silent == im.remote_peers.size()) {
    out += "; no peer on another host answers: this host's own network may be down";
  }
  return out;
}

// The CPU time of this process (every thread), in seconds.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void watchdog_main(Communicator* c, Communicator::Impl* im) {
  // Where the current wait was first seen: its start, and the process's CPU time and the clock
  // then, so that a timeout can say how much of a core the wait used.
  std::int64_t seen_since = 0, seen_at = 0;
  double seen_cpu = 0;
  while (!im->watchdog_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const std::int64_t since = im->busy_since;
    if (since != 0 && since != seen_since) {
      seen_since = since;
      seen_at = now_ns();
      seen_cpu = process_cpu_seconds();
    }
    if (since != 0) {
      // A peer on this host that no longer exists while we wait for it: name it and stop.
      for (auto [r, pid] : im->local_peers) {
        if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
          std::cerr << prefix(c->rank()) << "rank " << r << " (pid " << pid
                    << ") has exited while a collective waits for it. Aborting the job."
                    << std::endl;
#ifdef LOOM_HAVE_MPI
          MPI_Abort(MPI_COMM_WORLD, 4);
#endif
          std::_Exit(4);
        }
      }
    }
    if (since != 0 && (now_ns() - since) * 1e-9 > im->timeout) {
      const std::int64_t id = im->busy_id;
      std::string what = id >= 0 ? "all-reduce #" + std::to_string(id) : "a collective";
      std::string peers = local_peer_states(*im);
      const std::string remote = remote_peer_states(*im, 2.0);
      if (!remote.empty()) peers += (peers.empty() ? "" : "; ") + remote;
      const double wall = (now_ns() - seen_at) * 1e-9;
      const double share = wall > 0 ? (process_cpu_seconds() - seen_cpu) / wall : 0;
      char used[96];
      std::snprintf(used, sizeof used, " (this rank used %.1f%% of a core while waiting)",
                    100 * share);
      std::cerr << prefix(c->rank()) << what << " not complete after " << im->timeout << " s; "
                << (peers.empty() ? "a peer rank has exited, crashed or hung" : peers) << used
                << ". Aborting the job." << std::endl;
#ifdef LOOM_HAVE_MPI
      MPI_Abort(MPI_COMM_WORLD, 3);
#endif
      std::_Exit(3);
    }
  }
}

// RAII marker for a blocking collective in the calling thread (main thread calls).
struct Busy {
  Communicator::Impl& im;
  std::lock_guard<std::mutex> lock;
  explicit Busy(Communicator::Impl& i) : im(i), lock(i.mpi_mu) {
    im.busy_id = -1;
    im.busy_since = now_ns();
  }
  ~Busy() { im.busy_since = 0; }
};

}  // namespace

#ifdef LOOM_HAVE_MPI
#define LOOM_MPI_CHECK(call)                                                              \
  do {                                                                                    \
    int rc_ = (call);                                                                     \
    if (rc_ != MPI_SUCCESS) {                                                             \
      char text_[MPI_MAX_ERROR_STRING];                                                   \
      int len_ = 0;                                                                       \
      MPI_Error_string(rc_, text_, &len_);                                                \
      abort(std::string(#call).substr(0, std::string(#call).find('(')) + " failed: " +    \
            std::string(text_, static_cast<std::size_t>(len_)) +                          \
            " (a peer rank has probably exited)");                                        \
    }                                                                                     \
  } while (0)
#endif

namespace {
// Blocks until every queued reduction is done: a main-thread collective must not interleave with
// the communication thread's (the order of collectives must be the same on every rank).
[[maybe_unused]] void drain(Communicator::Impl& im) {
  std::unique_lock<std::mutex> lock(im.mu);
  im.cv.wait(lock, [&] { return im.queue.empty(); });
}
}  // namespace

void Communicator::broadcast(Tensor& t, int root) {
  if (size_ == 1) return;
#ifdef LOOM_HAVE_MPI
  drain(*impl_);
  Busy busy(*impl_);
  MPI_Request req;
  LOOM_MPI_CHECK(MPI_Ibcast(t.raw_data(), static_cast<int>(t.nbytes()), MPI_BYTE, root,
                            MPI_COMM_WORLD, &req));
  LOOM_MPI_CHECK(wait_request(&req));
#endif
}

void Communicator::broadcast_bytes(std::string& bytes, int root) {
  if (size_ == 1) return;
#ifdef LOOM_HAVE_MPI
  drain(*impl_);
  Busy busy(*impl_);
  long long n = static_cast<long long>(bytes.size());
  MPI_Request req;
  LOOM_MPI_CHECK(MPI_Ibcast(&n, 1, MPI_LONG_LONG, root, MPI_COMM_WORLD, &req));
  LOOM_MPI_CHECK(wait_request(&req));
  bytes.resize(static_cast<std::size_t>(n));
  LOOM_MPI_CHECK(
      MPI_Ibcast(bytes.data(), static_cast<int>(n), MPI_BYTE, root, MPI_COMM_WORLD, &req));
  LOOM_MPI_CHECK(wait_request(&req));
#endif
}

void Communicator::all_reduce(Tensor& t, bool mean, bool deterministic) {
  if (t.dtype() != DType::kFloat32 && t.dtype() != DType::kFloat64) {
    throw TypeError("parallel: all_reduce expects Float32 or Float64, got " +
                    std::string(dtype_name(t.dtype())));
  }
  const Tensor in[1] = {t};
  Tensor out[1] = {t};
  wait(start(in, mean, deterministic), out);
}

std::vector<std::uint64_t> Communicator::all_gather(std::uint64_t x) {
  std::vector<std::uint64_t> out(static_cast<std::size_t>(size_), x);
#ifdef LOOM_HAVE_MPI
  if (size_ > 1) {
    drain(*impl_);
    Busy busy(*impl_);
    MPI_Request req;
    LOOM_MPI_CHECK(
        MPI_Iallgather(&x, 1, MPI_UINT64_T, out.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD, &req));
    LOOM_MPI_CHECK(wait_request(&req));
  }
#endif
  return out;
}

void Communicator::barrier() {
#ifdef LOOM_HAVE_MPI
  if (size_ > 1) {
    drain(*impl_);
    Busy busy(*impl_);
    MPI_Request req;
    LOOM_MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
    LOOM_MPI_CHECK(wait_request(&req));
  }
#endif
}

void Communicator::abort(const std::string& message) {
  std::cerr << prefix(rank_) << message << ". Aborting the job." << std::endl;
#ifdef LOOM_HAVE_MPI
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited) MPI_Abort(MPI_COMM_WORLD, 2);
#endif
  std::_Exit(2);
}

std::int64_t Communicator::start(std::span<const Tensor> tensors, bool mean, bool deterministic) {
  auto p = std::make_shared<PendingReduce>();
  p->mean = mean;
  p->deterministic = deterministic;
  std::size_t bytes = 0;
  for (const Tensor& t : tensors) {
    if (t.dtype() != tensors[0].dtype()) {
      throw TypeError("parallel: expected one dtype per all-reduce bucket");
    }
    bytes += t.nbytes();
    p->count += t.numel();
  }
  p->dtype = tensors.empty() ? DType::kFloat32 : tensors[0].dtype();
  p->buf = impl_->take(bytes);
  p->bytes = bytes;
  p->scaled = !mean || size_ == 1;
  std::size_t off = 0;
  for (const Tensor& t : tensors) {
    if (t.nbytes()) std::memcpy(p->buf.data.get() + off, t.raw_data(), t.nbytes());
    off += t.nbytes();
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  p->id = next_id_++;
  impl_->inflight[p->id] = p;
  if (size_ == 1) {
    p->done = true;
  } else {
    impl_->queue.push_back(p);
    if (overlap_) impl_->cv.notify_all();
  }
  return p->id;
}

void Communicator::wait(std::int64_t id, std::span<Tensor> outs) {
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<PendingReduce> p;
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    auto it = impl_->inflight.find(id);
    if (it == impl_->inflight.end()) {
      throw ValueError("parallel: expected an all-reduce in flight, got token " +
                       std::to_string(id));
    }
    p = it->second;
    if (!overlap_) {
      // Run every queued reduction up to this one here, in issue order.
      while (!p->done && !impl_->queue.empty()) {
        auto q = impl_->queue.front();
        lock.unlock();
        reduce_now(*this, *impl_, *q, /*on_communication_thread=*/false);
        lock.lock();
        impl_->queue.pop_front();
        q->done = true;
      }
    }
    impl_->cv.wait(lock, [&] { return p->done; });
    impl_->inflight.erase(id);
  }
  std::size_t off = 0;
  for (Tensor& t : outs) {
    if (t.dtype() != p->dtype || off + t.nbytes() > p->bytes) {
      throw InternalError("parallel: all-reduce outputs do not match the started tensors");
    }
    const char* src = p->buf.data.get() + off;
    if (p->scaled) {
      if (t.nbytes()) std::memcpy(t.raw_data(), src, t.nbytes());
    } else if (t.dtype() == DType::kFloat32) {
      copy_scaled(t.data<float>(), reinterpret_cast<const float*>(src), t.numel(), size_);
    } else {
      copy_scaled(t.data<double>(), reinterpret_cast<const double*>(src), t.numel(), size_);
    }
    off += t.nbytes();
  }
  impl_->give(std::move(p->buf));
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- init / finalize ---------------------------------------------------------------------------

bool built_with_mpi() {
#ifdef LOOM_HAVE_MPI
  return true;
#else
  return false;
#endif
}

Communicator& world() {
  if (!g_world) {
    g_world = new Communicator();
    g_world->impl_ = std::make_shared<Communicator::Impl>();
  }
  return *g_world;
}

bool initialized() { return g_initialized; }
int rank() { return g_world ? g_world->rank() : 0; }
int size() { return g_world ? g_world->size() : 1; }

namespace {
int env_size() {
  for (const char* v : {"LOOM_NUM_RANKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* s = std::getenv(v)) return std::atoi(s);
  }
  return 1;
}
}  // namespace

void init(int* argc, char*** argv, const InitOptions& options) {
  if (g_initialized) return;
  Communicator& c = world();
  Communicator::Impl& im = *c.impl_;
  im.timeout = options.timeout_seconds;
  if (const char* s = std::getenv("LOOM_PARALLEL_TIMEOUT")) im.timeout = std::atof(s);
#ifdef LOOM_HAVE_MPI
  if (const char* s = std::getenv("LOOM_PARALLEL_SPIN_MS")) {
    g_spin_ns = static_cast<std::int64_t>(std::atof(s) * 1e6);
  }
#endif
#ifdef LOOM_HAVE_MPI
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    im.we_initialised_mpi = true;
    if (provided < MPI_THREAD_SERIALIZED) {
      std::cerr << "loom.parallel: MPI gives thread level " << provided
                << " < MPI_THREAD_SERIALIZED; all-reduces will not overlap the backward pass"
                << std::endl;
      c.overlap_ = false;
    }
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &c.size_);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
#else
  if (env_size() > 1) {
    throw ValueError("parallel: data parallelism over " + std::to_string(env_size()) +
                     " processes was asked for, but this build has no MPI (configure with "
                     "libopenmpi-dev installed and -DLOOM_MPI=ON)");
  }
  c.rank_ = 0;
  c.size_ = 1;
#endif
  (void)env_size;
  std::snprintf(g_signal_prefix, sizeof g_signal_prefix,
                "loom.parallel: rank %d (pid %d, host %s) got signal ", c.rank_,
                static_cast<int>(getpid()), hostname().c_str());
  if (options.signal_handlers) {
    for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(s, on_signal);
  }
  register_comm_kernels();
#ifdef LOOM_HAVE_MPI
  if (c.size_ > 1) {
    // Who runs where: every rank's pid, host name, probe port and up
    // to 4 IPv4 addresses.
    const std::string host = hostname();
    constexpr int kAddresses = 4, kFields = 3 + kAddresses, kName = 256;  // hostname() holds 255
    int port = 0;
    im.probe_fd = listen_for_probes(&port);
    const std::vector<std::uint32_t> addresses =
        im.probe_fd >= 0 ? host_addresses(kAddresses) : std::vector<std::uint32_t>{};
    long long mine[kFields] = {static_cast<long long>(getpid()), port,
                               static_cast<long long>(addresses.size())};
    for (std::size_t i = 0; i < addresses.size(); ++i) mine[3 + i] = addresses[i];
    const auto n = static_cast<std::size_t>(c.size_);
    std::vector<long long> all(kFields * n);
    MPI_Allgather(mine, kFields, MPI_LONG_LONG, all.data(), kFields, MPI_LONG_LONG, MPI_COMM_WORLD);
    char my_name[kName] = {0};
    std::snprintf(my_name, sizeof my_name, "%s", host.c_str());
    std::vector<char> names(kName * n);
    MPI_Allgather(my_name, kName, MPI_CHAR, names.data(), kName, MPI_CHAR, MPI_COMM_WORLD);
    for (int r = 0; r < c.size_; ++r) {
      if (r == c.rank_) continue;
      const long long* f = &all[static_cast<std::size_t>(kFields * r)];
      const char* name = &names[static_cast<std::size_t>(kName * r)];
      const std::string peer_host(name, strnlen(name, kName));
      if (peer_host == my_name) {
        im.local_peers.push_back({r, static_cast<long>(f[0])});
        continue;
      }
      Communicator::Impl::RemotePeer peer{r, static_cast<long>(f[0]), peer_host,
                                          static_cast<int>(f[1]), {}};
      for (long long i = 0; i < f[2] && i < kAddresses; ++i) {
        peer.addresses.push_back(static_cast<std::uint32_t>(f[3 + i]));
      }
      if (peer.port > 0) im.remote_peers.push_back(std::move(peer));
    }
  }
#endif
  if (c.size_ > 1) {
    im.thread = std::thread(comm_thread_main, &c, &im);
    im.watchdog = std::thread(watchdog_main, &c, &im);
  }
  g_initialized = true;
  static bool at_exit = [] { return std::atexit([] { finalize(); }) == 0; }();
  (void)at_exit;
}

void finalize() {
  if (!g_initialized) return;
  Communicator& c = world();
  Communicator::Impl& im = *c.impl_;
  {
    std::lock_guard<std::mutex> lock(im.mu);
    im.stop = true;
  }
  im.cv.notify_all();
  // Reductions still queued (overlap off, never waited for) run in the thread before it stops,
  // so that every rank completes the same collectives.
  if (im.thread.joinable()) im.thread.join();
  im.watchdog_stop = true;
  if (im.watchdog.joinable()) im.watchdog.join();
  if (im.probe_fd >= 0) close(im.probe_fd);
  im.probe_fd = -1;
  im.local_peers.clear();
  im.remote_peers.clear();
#ifdef LOOM_HAVE_MPI
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (im.we_initialised_mpi && !finalized) MPI_Finalize();
#endif
  g_initialized = false;
  im.stop = false;
  im.watchdog_stop = false;
}

void Communicator::set_trace(TraceSink* sink) {
  if (!impl_) return;  // a size-1 communicator runs no reduction
  std::lock_guard<std::mutex> lock(impl_->mpi_mu);  // waits for a running reduction
  impl_->trace.store(sink, std::memory_order_release);
}

}  // namespace loom::parallel
