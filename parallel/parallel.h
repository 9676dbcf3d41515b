/// \file
/// Data parallelism over MPI (MindSpore's communication.init / get_rank / get_group_size and
/// DistributedGradReducer; PyTorch's DistributedDataParallel).
///
///     parallel::init(&argc, &argv);  // size 1 without mpirun, or in a build without MPI
///     random::seed_all(1);           // the same seed on every rank
///     nn::Model model(net, loss, nn::OptimizerSpec{.learning_rate = 0.01});
///     // (resume: restore the checkpoint on every rank — or on rank 0 only — before this line)
///     parallel::setup_data_parallel(model, parallel::world());  // reducer + broadcast from rank 0
///     auto ds = parallel::shard_for_rank(data->shuffle(), parallel::world())->batch(16);
///     model.train(epochs, ds, {&ckpt_callback_on_rank0_only, &summary_in_rank_dir});
///     parallel::finalize();
///
/// Ranks, size, communicator. init() calls MPI_Init_thread (MPI_THREAD_SERIALIZED) when the build
/// has MPI (CMake option LOOM_MPI, default ON when MPI is found) and MPI is not initialised yet;
/// without mpirun, Open MPI runs as a singleton: rank 0 of size 1. In a build without MPI, init()
/// gives rank 0 of size 1 too, and asking for data parallelism with more than one process
/// (LOOM_NUM_RANKS / OMPI_COMM_WORLD_SIZE / PMI_SIZE > 1 in the environment) is a ValueError saying
/// the build has no MPI. Only the world communicator exists (world()).
///
/// Gradients. make_gradient_reducer emits, into the training step graph, one AllReduceStart /
/// AllReduceWait pair per bucket (ops/comm_ops.cc): gradients are grouped in reverse parameter order
/// (the order backward produces them) into buckets of at most bucket_bytes (one dtype per bucket; a
/// larger tensor is a bucket alone). The starts are chained, so the scheduler's depth-first order
/// issues each one right after its bucket's last gradient and all before the first wait; a start
/// copies its gradients into a staging buffer and hands it to the communication thread, which runs
/// the reductions one by one in issue order (the same on every rank) while the backward pass goes on.
/// Each wait returns the mean over ranks. Size 1: the gradients are returned unchanged, no op emitted.
///
/// Determinism. Default: MPI_Allreduce(SUM) then a division by size. With deterministic (or
/// random::deterministic_mode() when the reducer is made), each bucket is allgathered and every rank
/// sums the ranks' contributions in rank order 0, 1, ..., n-1 itself: the order no longer depends on
/// the algorithm Open MPI picks for the message size and process count (coll/tuned switches between
/// recursive doubling, ring, Rabenseifner... by size), so runs repeat bitwise and all ranks get
/// identical bits by construction. It moves n times the bytes (bench/README.md).
///
/// BatchNorm's moving statistics (Cell::assign state) are not reduced: each rank keeps its own, as
/// MindSpore does by default (no SyncBatchNorm); the gradients, and so the weights, stay identical.
///
/// Failure. A rank that dies: Open MPI's mpirun kills the job and names the rank ("mpirun noticed
/// that process rank 1 ... exited on signal 9"). Ours on top: init() installs handlers for SIGSEGV,
/// SIGBUS, SIGFPE, SIGILL and SIGABRT that print "loom.parallel: rank R (pid P, host H) got signal
/// S" before dying; MPI errors return to us (MPI_ERRORS_RETURN) and abort the job with
/// "loom.parallel: rank R: MPI_... failed: ..."; and a watchdog thread per rank, while a collective
/// is in progress, (1) checks every 200 ms that the peers on its host still exist (pids exchanged
/// at init) and otherwise prints "loom.parallel: rank R: rank Q (pid P) has exited while a
/// collective waits for it" and calls MPI_Abort, and (2) bounds every collective: one not finished
/// after timeout_seconds (LOOM_PARALLEL_TIMEOUT, default 60 s) prints "loom.parallel: rank R:
/// all-reduce #k not complete after T s; a peer rank has exited, crashed or hung" and calls
/// MPI_Abort, so a stuck peer (alive, on any host) never makes the job hang silently.
///
/// Checkpoints: rank 0 writes them (is_writer()); every rank holds the same weights after each step,
/// so rank 0's file is the job's state. To resume under mpirun with the same number of ranks, every
/// rank loads the same file (or rank 0 alone), then setup_data_parallel broadcasts rank 0's values.
/// Summaries: one event file per rank, in rank_dir(base) = "<base>/rank_<id>".
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/ir/tensor.h"
#include "data/dataset.h"
#include "nn/train.h"

namespace loom::nn {
class Model;
}  // namespace loom::nn

namespace loom::parallel {

/// True when this build has MPI (LOOM_MPI on and MPI found).
bool built_with_mpi();

/// The options of init().
struct InitOptions {
  /// The watchdog's bound on one reduction (seconds); LOOM_PARALLEL_TIMEOUT overrides it.
  double timeout_seconds = 60;
  /// Install the signal handlers that name the rank on a crash.
  bool signal_handlers = true;
};

/// Initialises MPI (when built with it) and registers the communication kernels. Idempotent.
void init(int* argc = nullptr, char*** argv = nullptr, const InitOptions& options = {});
/// Finishes outstanding reductions, stops the communication thread and calls MPI_Finalize when
/// init() called MPI_Init. Idempotent; also run at exit.
void finalize();
/// Whether init() has run (and finalize() has not since).
bool initialized();
int rank();  ///< 0 before init()
int size();  ///< 1 before init()

/// One in-flight collective: what AllReduceStart hands to the communication thread.
struct PendingReduce;

/// The ranks of the job and their collectives. Only the world communicator exists (world()).
/// broadcast, broadcast_bytes, all_gather and barrier first wait until the queued bucket
/// reductions are done, so the collectives run in the same order on every rank.
class Communicator {
 public:
  /// This process's rank, 0 ... size() - 1.
  int rank() const { return rank_; }
  /// The number of ranks.
  int size() const { return size_; }

  /// In place: t takes rank root's value on every rank (same dtype and shape everywhere).
  void broadcast(Tensor& t, int root = 0);
  /// In place: `bytes` takes rank root's value (and length) on every rank.
  void broadcast_bytes(std::string& bytes, int root = 0);
  /// Blocking all-reduce in place: sum, or mean when mean is true; deterministic as above.
  void all_reduce(Tensor& t, bool mean, bool deterministic);
  /// Every rank's value of x, in rank order.
  std::vector<std::uint64_t> all_gather(std::uint64_t x);
  /// Returns once every rank has called it.
  void barrier();
  /// Ends the job (all ranks) with a message naming this rank.
  [[noreturn]] void abort(const std::string& message);

  /// Non-blocking bucket reduction (the AllReduceStart / AllReduceWait kernels): copies the
  /// tensors (one floating dtype) and queues their reduction; returns its id (issue order).
  std::int64_t start(std::span<const Tensor> tensors, bool mean, bool deterministic);
  /// Waits for reduction `id` and writes its results into outs (the shapes given to start).
  void wait(std::int64_t id, std::span<Tensor> outs);

  /// With overlap off, the reductions run in the waiting thread at the first wait (for
  /// measurements: the same bytes, no concurrency with the backward pass). Set before the first
  /// start; the same on every rank.
  void set_overlap(bool on) { overlap_ = on; }
  /// Whether the reductions overlap the backward pass (the default; off when MPI lacks
  /// MPI_THREAD_SERIALIZED).
  bool overlap() const { return overlap_; }
  /// Seconds the waits spent blocked (summed since the last reset), and the number of reductions
  /// started (never reset).
  ///@{
  double wait_seconds() const { return wait_seconds_; }
  std::int64_t num_reductions() const { return next_id_; }
  ///@}
  /// Sets wait_seconds() back to 0.
  void reset_wait_seconds() { wait_seconds_ = 0; }

  /// Tracing (the profiler, debug/profiler.h): each bucket reduction is reported by the thread
  /// that ran it (the communication thread, or a waiter with overlap off) with its id, bytes and
  /// steady_clock nanoseconds. set_trace waits for a running reduction, so after it returns the
  /// previous sink is no longer called. Without a sink a reduction pays one atomic load.
  struct TraceSink {
    virtual ~TraceSink() = default;
    /// Called when a reduction ends: its id, its bytes (this rank's tensors), its start and end
    /// (steady_clock nanoseconds) and whether the communication thread ran it.
    virtual void reduction(std::int64_t id, std::size_t bytes, std::int64_t begin_ns,
                           std::int64_t end_ns, bool on_communication_thread) = 0;
  };
  /// Reports the reductions to `sink` from now on (nullptr: to none); not owned.
  void set_trace(TraceSink* sink);

  struct Impl;

 private:
  friend void init(int*, char***, const InitOptions&);
  friend void finalize();
  friend Communicator& world();
  Communicator() = default;
  int rank_ = 0, size_ = 1;
  bool overlap_ = true;
  double wait_seconds_ = 0;
  std::int64_t next_id_ = 0;
  std::shared_ptr<Impl> impl_;
};

/// The world communicator (init() first; before it, a size-1 communicator).
Communicator& world();

/// The options of make_gradient_reducer.
struct ReducerOptions {
  /// Bucket capacity in bytes (PyTorch DDP's bucket_cap_mb = 25, MindSpore's fusion buckets).
  std::size_t bucket_bytes = 25u << 20;
  /// Fixed-order reduction (allgather + rank-ordered sum); default: random::deterministic_mode().
  std::optional<bool> deterministic;
  bool mean = true;  ///< the mean over the ranks; false: their sum
};

/// The all-reduce inserted between autodiff and the update (TrainOneStepCell::set_gradient_reducer).
/// Size 1: returns the gradients unchanged and emits nothing.
nn::TrainOneStepCell::GradientReducer make_gradient_reducer(Communicator& comm,
                                                            ReducerOptions options = {});

/// The bucket plan make_gradient_reducer uses: indices into the gradient list, per bucket, in
/// issue order (reverse parameter order, one dtype per bucket, at most bucket_bytes unless a single
/// tensor is larger).
std::vector<std::vector<std::size_t>> plan_buckets(const std::vector<std::size_t>& nbytes,
                                                   const std::vector<DType>& dtypes,
                                                   std::size_t bucket_bytes);

/// The options of setup_data_parallel.
struct DataParallelOptions {
  ReducerOptions reducer;  ///< for the gradient reducer it sets
};

/// Everything a training loop needs (for the training library and users): sets the gradient
/// reducer on the step cell, then broadcasts rank 0's parameters (every Parameter of the network,
/// trainable or not), optimizer states (every rank's optimizer made the same ones) and step count.
/// The Model version also sets the Model's reducer: metrics and epoch losses are summed over the
/// ranks (fixed order). Call before the first step, after any restore. Size 1: does nothing (no
/// reducer is set, nothing is broadcast).
///@{
void setup_data_parallel(nn::TrainOneStepCell& cell, Communicator& comm,
                         const DataParallelOptions& options = {});
void setup_data_parallel(nn::Model& model, Communicator& comm,
                         const DataParallelOptions& options = {});
///@}
/// Broadcasts every parameter of cell from rank 0 (in place).
void broadcast_parameters(nn::Cell& cell, Communicator& comm);

/// The sharding rule: rank r reads rows r, r + n, r + 2n, ... of the dataset. Apply it after
/// shuffle() (every rank draws the same permutation from the shared seed, so the ranks split one
/// global permutation with no overlap) and before batch(): batch b of rank r then holds rows
/// b·B·n + r, + n, ... of the global order, and the n local batches of B together are exactly the
/// global batch of n·B a single process would train on. Size 1: the dataset itself.
data::DatasetPtr shard_for_rank(const data::DatasetPtr& dataset, const Communicator& comm);

/// "<base>/rank_<id>" (created): where rank id writes its summaries.
std::string rank_dir(const std::string& base);
/// Whether this rank writes the job's checkpoints (rank 0).
bool is_writer();

/// A hash of the bits of tensors (FNV-1a over dtype, shape and bytes), for equality checks.
std::uint64_t hash_tensors(const std::vector<const Tensor*>& tensors);

/// Adds the communication kernels to a device's registry, host-staged: each copies its tensors to
/// the host, reduces them there and copies the results back (ranks that share a GPU, or a build
/// without NCCL). No-op for the CPU. setup_data_parallel calls it for the context's device.
void register_device_comm_kernels(backend::Backend& backend);

}  // namespace loom::parallel
