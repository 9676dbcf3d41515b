"""Data parallelism from Python: loom.communication and the auto parallel context in this process,
and parallel_worker.py under `mpirun -np 2` against one process training on the global batches
(the checks of tests/parallel's C++ driver: ranks bitwise equal, 1e-5 from the single process)."""
import hashlib
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from loom import _loom, communication, nn

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "parallel_worker.py")
TIMEOUT = 120  # seconds for one job (the watchdog ends a hung collective after 60 s)

# As tests/parallel/CMakeLists.txt runs its driver: shared memory only, ranks may outnumber cores.
MPI_ENV = {
    "OMPI_MCA_btl": "self,vader",
    "OMPI_MCA_mpi_yield_when_idle": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "LOOM_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "LOOM_PARALLEL_TIMEOUT": "60",
}


@pytest.fixture(autouse=True)
def stand_alone_afterwards():
    yield
    communication.reset_auto_parallel_context()


def test_the_auto_parallel_context_takes_data_parallel_and_refuses_other_modes():
    get = communication.get_auto_parallel_context
    assert get("parallel_mode") == "stand_alone" and get("gradients_mean") is False
    communication.set_auto_parallel_context(parallel_mode=communication.ParallelMode.DATA_PARALLEL,
                                            gradients_mean=True)
    assert get("parallel_mode") == "data_parallel" and get("gradients_mean") is True
    assert get("device_num") == 1  # the group size unless set
    for mode in ("semi_auto_parallel", "auto_parallel", "hybrid_parallel", "DATA"):
        with pytest.raises(ValueError, match=f"expected parallel_mode 'stand_alone' or "
                                             f"'data_parallel'.*got '{mode}'"):
            communication.set_auto_parallel_context(parallel_mode=mode)
    assert get("parallel_mode") == "data_parallel"  # a refused call changes nothing
    with pytest.raises(ValueError, match="got 'pipeline_stages'"):
        communication.set_auto_parallel_context(pipeline_stages=2)
    with pytest.raises(TypeError, match="gradients_mean a bool"):
        communication.set_auto_parallel_context(gradients_mean=1)
    communication.reset_auto_parallel_context()
    assert get("parallel_mode") == "stand_alone" and get("gradients_mean") is False


def small_step():
    net = nn.SequentialCell([nn.Dense(4, 3)])
    return nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()),
                               nn.Momentum(net.trainable_params(), 0.1, 0.9))


def test_without_mpirun_a_process_is_rank_0_of_1_and_set_up_is_once_per_step_cell():
    communication.init()
    assert communication.get_rank() == 0 and communication.get_group_size() == 1
    with pytest.raises(ValueError, match="only one"):
        communication.get_rank(group="other")
    step = small_step()
    assert communication._setup_data_parallel(step) is False  # stand-alone: nothing
    communication.set_auto_parallel_context(parallel_mode="data_parallel")
    assert communication._setup_data_parallel(step) is True
    assert communication._setup_data_parallel(step) is False
    x = np.ones((2, 4), np.float32)
    step(x, np.zeros((2, 3), np.float32))  # size 1: the step graph has no all-reduce
    assert communication._setup_data_parallel(step) is False  # after a step: still no error
    communication.set_auto_parallel_context(device_num=2)
    with pytest.raises(ValueError, match="expected device_num 2 ranks"):
        communication._setup_data_parallel(small_step())
    with pytest.raises(TypeError, match="expected a Model or a TrainOneStepCell, got a list"):
        _loom.setup_data_parallel([])


def run_python(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=TIMEOUT, env={**os.environ, **env})


def test_under_a_launcher_ranks_need_init_first():
    # LOOM_NUM_RANKS marks a launched process as OMPI_COMM_WORLD_SIZE does, without mpirun.
    out = run_python("from loom import communication\ncommunication.get_rank()",
                     LOOM_NUM_RANKS="2")
    assert out.returncode != 0
    assert "get_rank: expected loom.communication.init() first" in out.stderr


def mpirun():
    """mpirun, or the test fails: CI has Open MPI (scripts/setup.sh installs it)."""
    if not _loom.built_with_mpi():
        why = "loom is built without MPI (parallel/mpi says why)"
        if os.environ.get("LOOM_REQUIRE_INTEROP") == "1":
            pytest.fail(f"{why}; LOOM_REQUIRE_INTEROP=1: the mpirun tests must run")
        pytest.skip(why)
    path = os.environ.get("MPIEXEC") or shutil.which("mpirun")
    if path is None:
        pytest.fail("mpirun not found (install Open MPI: scripts/setup.sh); the data-parallel "
                    "test cannot run without it")
    return path


def run_job(args, ranks=None):
    """The worker alone (ranks None) or under mpirun -np ranks; killed after TIMEOUT seconds."""
    cmd = [sys.executable, WORKER, *args]
    if ranks is not None:
        cmd = [mpirun(), "-np", str(ranks), "--oversubscribe", "--bind-to", "none", *cmd]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**os.environ, **MPI_ENV}, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        pytest.fail(f"{' '.join(cmd)}: no end after {TIMEOUT} s (a hang)\n{out}")
    return p.returncode, out


def weights_sha256(npz):
    h = hashlib.sha256()
    for k in sorted(k for k in npz.files if k.startswith("w:")):
        h.update(npz[k].tobytes())
    return h.hexdigest()


def max_weight_diff(a, b):
    assert sorted(a.files) == sorted(b.files)
    return max(float(np.abs(a[k] - b[k]).max()) for k in a.files if k.startswith("w:"))


def test_two_ranks_train_to_the_weights_of_one_process_on_the_global_batches(tmp_path):
    rc, out = run_job([str(tmp_path)], ranks=2)
    assert rc == 0, out
    rc, out = run_job([str(tmp_path)])
    assert rc == 0, out
    for name in ("model", "step", "step_sum"):
        r0, r1 = (np.load(tmp_path / f"{name}_rank{r}_of2.npz") for r in (0, 1))
        ref = np.load(tmp_path / f"{name}_rank0_of1.npz")
        assert weights_sha256(r0) == weights_sha256(r1), f"{name}: the ranks' weights differ"
        diff = max_weight_diff(r0, ref)
        assert diff <= 1e-5, f"{name}: 2 ranks x 8 vs 1 x 16 differ by {diff}"
    # Model: the epochs' mean losses are over both ranks' rows (the Model's reducer), and fall.
    r0, r1, ref = (np.load(tmp_path / f"model_{s}.npz") for s in ("rank0_of2", "rank1_of2",
                                                                   "rank0_of1"))
    np.testing.assert_array_equal(r0["epoch_loss"], r1["epoch_loss"])
    np.testing.assert_allclose(r0["epoch_loss"], ref["epoch_loss"], rtol=0, atol=1e-5)
    assert r0["epoch_loss"][1] < r0["epoch_loss"][0]
    # TrainOneStepCell: each rank's loss is its half's; their mean is the global batch's.
    for name in ("step", "step_sum"):
        r0, r1 = (np.load(tmp_path / f"{name}_rank{r}_of2.npz") for r in (0, 1))
        ref = np.load(tmp_path / f"{name}_rank0_of1.npz")
        assert not np.array_equal(r0["losses"], r1["losses"])  # the ranks read different rows
        np.testing.assert_allclose((r0["losses"] + r1["losses"]) / 2, ref["losses"], rtol=0,
                                   atol=1e-5)


def test_an_exception_on_one_rank_ends_the_job_naming_the_rank(tmp_path):
    rc, out = run_job([str(tmp_path), "--fail-rank", "1"], ranks=2)
    assert rc != 0, out
    assert "loom.parallel: rank 1: uncaught RuntimeError: rank 1 fails on purpose" in out, out
