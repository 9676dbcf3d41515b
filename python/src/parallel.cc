// Data parallelism from Python, under `mpirun -np N python3 script.py` (loom.communication wraps
// these): MPI started and finished (parallel::init / finalize, only when a launcher started the
// process, as `loom train` does), the rank and group size, and the two steps a training script
// needs — setup_data_parallel (the gradient all-reduce in the step graph, then rank 0's
// parameters, optimizer states and step count on every rank; once per Model or
// TrainOneStepCell, before its first step) and shard_for_rank (this rank's rows of a dataset,
// between shuffle and batch). The parallel mode (set_auto_parallel_context) lives in
// loom/communication.py, which decides when to call setup_data_parallel.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/ir/error.h"
#include "data/dataset.h"
#include "nn/model.h"
#include "nn/train.h"
#include "parallel/parallel.h"
#include "python/src/bindings.h"
#include "train/run.h"

namespace loom::python {

namespace {

// MPI cannot start again once finalised: init() after release() is an error, not a crash.
bool g_released = false;

// The Models and step cells already set up. Weak: an object that dies leaves the list (its
// address may be reused by a new one, which must be set up afresh).
std::vector<std::weak_ptr<void>> g_set_up;

bool set_up_before(const std::shared_ptr<void>& obj) {
  std::erase_if(g_set_up, [](const std::weak_ptr<void>& w) { return w.expired(); });
  for (const std::weak_ptr<void>& w : g_set_up) {
    if (w.lock() == obj) return true;
  }
  return false;
}

void check_started(const char* place) {
  if (g_released) {
    throw ValueError(std::string(place) +
                     ": expected MPI running, got loom.communication.release() called before");
  }
  if (train::launched_by_mpi() && !parallel::initialized()) {
    throw ValueError(std::string(place) +
                     ": expected loom.communication.init() first (this process was started by "
                     "mpirun), got no init");
  }
}

// Sets up obj (a Model or a TrainOneStepCell) once; true when it did now.
template <typename T>
bool setup_once(const std::shared_ptr<T>& obj, bool gradients_mean) {
  if (set_up_before(obj)) return false;
  parallel::DataParallelOptions options;
  options.reducer.mean = gradients_mean;
  {
    py::gil_scoped_release release;  // broadcasts: every rank must get here
    parallel::setup_data_parallel(*obj, parallel::world(), options);
  }
  g_set_up.push_back(obj);
  return true;
}

// Ranks on this host (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, else every rank), as loom train
// counts them to share the cores.
int local_ranks() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* s = std::getenv(v); s != nullptr && std::atoi(s) > 0) return std::atoi(s);
  }
  return parallel::size();
}

}  // namespace

void init_parallel(py::module_& m) {
  m.def(
      "parallel_init",
      [] {
        if (g_released) {
          throw ValueError("loom.communication.init: expected a process where MPI has not been "
                           "finalised, got release() called before (MPI cannot start again)");
        }
        // A plain process never starts MPI (an Open MPI singleton costs about a second): it is
        // rank 0 of 1. Under mpirun, MPI_Init_thread; in a build without MPI, a ValueError
        // saying so.
        if (!train::launched_by_mpi() || parallel::initialized()) return;
        py::gil_scoped_release release;
        parallel::init();
        // The host's cores shared by its ranks, as under `mpirun loom train` (the thread pool
        // reads LOOM_NUM_THREADS when it starts: this holds unless ops ran before init()).
        if (parallel::size() > 1 && std::getenv("LOOM_NUM_THREADS") == nullptr) {
          const int cores = static_cast<int>(std::thread::hardware_concurrency());
          const std::string threads = std::to_string(std::max(1, cores / local_ranks()));
          setenv("LOOM_NUM_THREADS", threads.c_str(), 1);
        }
      },
      "MPI started when a launcher (mpirun) started this process; otherwise rank 0 of 1");
  m.def(
      "parallel_finalize",
      [] {
        if (!parallel::initialized()) return;
        py::gil_scoped_release release;
        parallel::finalize();
        g_released = true;
      },
      "Outstanding reductions finished, MPI finalised (idempotent)");
  m.def(
      "parallel_abort",
      [](const std::string& message) {
        py::gil_scoped_release release;
        parallel::world().abort(message);
      },
      py::arg("message"),
      "Ends the whole job (every rank) with message, naming this rank (MPI_Abort)");
  m.def("parallel_initialized", &parallel::initialized);
  m.def("launched_by_mpi", &train::launched_by_mpi,
        "Whether a launcher started this process (OMPI_COMM_WORLD_SIZE, PMI_SIZE, LOOM_NUM_RANKS)");
  m.def("built_with_mpi", &parallel::built_with_mpi);
  m.def("get_rank", [] { return parallel::world().rank(); });
  m.def("get_group_size", [] { return parallel::world().size(); });

  m.def(
      "setup_data_parallel",
      [](const py::object& obj, bool gradients_mean) {
        check_started("setup_data_parallel");
        if (py::isinstance<nn::Model>(obj)) {
          return setup_once(obj.cast<std::shared_ptr<nn::Model>>(), gradients_mean);
        }
        if (py::isinstance<nn::TrainOneStepCell>(obj)) {
          return setup_once(obj.cast<std::shared_ptr<nn::TrainOneStepCell>>(), gradients_mean);
        }
        throw TypeError("setup_data_parallel: expected a Model or a TrainOneStepCell, got a " +
                        std::string(py::str(py::type::of(obj).attr("__name__"))));
      },
      py::arg("model_or_step"), py::arg("gradients_mean") = true,
      "Data parallelism for a Model or TrainOneStepCell, before its first step: the gradients "
      "all-reduced in the step (their mean over the ranks, or their sum), then rank 0's "
      "parameters, optimizer states and step count on every rank. Once per object: returns "
      "True when it set up now, False when it had. Group size 1: nothing to do.");
  m.def(
      "shard_for_rank",
      [](const data::DatasetPtr& dataset) {
        check_started("shard_for_rank");
        return parallel::shard_for_rank(dataset, parallel::world());
      },
      py::arg("dataset"),
      "This rank's rows r, r + n, ... of the dataset (group size 1: the dataset itself). Apply "
      "it after shuffle and before batch: the n local batches of B are then exactly the global "
      "batch of n * B one process would read.");
}

}  // namespace loom::python
