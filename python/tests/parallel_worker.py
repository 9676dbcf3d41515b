"""The script test_parallel.py runs under `mpirun -np N` (and alone, as the reference): trains a
small network data-parallel as MindSpore users write it and saves each rank's weights.

    mpirun -np 2 python3 parallel_worker.py OUT_DIR [--fail-rank R]
    python3 parallel_worker.py OUT_DIR          # one process on the global batches

Two trainings, each on global batches of 16 rows of the same data:
  model: Model.train, 2 epochs of NumpySlicesDataset -> shuffle -> this rank's shard -> batch
         (16 / N rows);
  step:  TrainOneStepCell, 6 steps, rank r taking rows r, r + N, ... of each global batch;
  step_sum: the same with gradients_mean=False (the gradients summed) and the learning rate
         divided by N: the same updates as one process at the full rate.
OUT_DIR/<training>_rank<r>_of<N>.npz holds the weights by name, the epoch's mean loss (model)
and the losses (step). With --fail-rank R, rank R raises before training (the job must end).
"""
import argparse
import os

import numpy as np

import loom
from loom import communication, nn
from loom.communication import get_group_size, get_rank, init

GLOBAL_BATCH = 16


def data(rows):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((rows, 4)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > x[:, 2]).astype(np.int32) + (x[:, 3] > 0.5).astype(np.int32)
    return x, y


def network():
    return nn.SequentialCell([nn.Dense(4, 16), nn.ReLU(), nn.Dense(16, 3)])


def weights(net):
    return {name: p.asnumpy().copy() for name, p in net.parameters_and_names()}


class EpochLoss(loom.Callback):
    def __init__(self):
        self.losses = []

    def on_train_epoch_end(self, run_context):
        self.losses.append(run_context.original_args().epoch_loss_mean)


def train_model(rank, size):
    loom.set_seed(3)
    net = network()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True)
    model = loom.Model(net, loss, nn.Momentum(net.trainable_params(), 0.05, 0.9))
    x, y = data(96)
    ds = loom.dataset.NumpySlicesDataset((x, y), column_names=["x", "y"]).shuffle()
    ds = ds.shard(communication.get_group_size(), communication.get_rank())  # after the shuffle
    ds = ds.batch(GLOBAL_BATCH // size, drop_remainder=True)
    cb = EpochLoss()
    model.train(2, ds, callbacks=[cb])
    return weights(net), {"epoch_loss": np.array(cb.losses)}


def train_steps(rank, size, gradients_mean=True):
    if size > 1:
        communication.set_auto_parallel_context(gradients_mean=gradients_mean)
    loom.set_seed(4)
    net = network()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True)
    lr = 0.05 if gradients_mean else 0.05 / size
    step = nn.TrainOneStepCell(nn.WithLossCell(net, loss),
                               nn.Momentum(net.trainable_params(), lr, 0.9))
    x, y = data(6 * GLOBAL_BATCH)
    losses = []
    for s in range(6):
        rows = slice(s * GLOBAL_BATCH + rank, (s + 1) * GLOBAL_BATCH, size)
        losses.append(step(x[rows], y[rows]).asnumpy())
    return weights(net), {"losses": np.array(losses)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--fail-rank", type=int, default=-1)
    a = ap.parse_args()
    init()
    rank, size = get_rank(), get_group_size()
    if size > 1:
        # (loom.set_auto_parallel_context once loom/__init__.py re-exports it)
        communication.set_auto_parallel_context(parallel_mode="data_parallel",
                                                gradients_mean=True)
    if rank == a.fail_rank:
        raise RuntimeError(f"rank {rank} fails on purpose")
    trainings = (("model", train_model), ("step", train_steps),
                 ("step_sum", lambda r, n: train_steps(r, n, gradients_mean=False)))
    for name, train in trainings:
        w, extra = train(rank, size)
        np.savez(os.path.join(a.out, f"{name}_rank{rank}_of{size}.npz"),
                 **{f"w:{k}": v for k, v in w.items()}, **extra)
    communication.release()


if __name__ == "__main__":
    main()
