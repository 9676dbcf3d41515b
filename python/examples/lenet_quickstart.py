"""MindSpore's LeNet quick start, written for loom: the network as a Python Cell, Fashion-MNIST
through the data pipeline, Model.train with a Python callback, Model.eval.

    PYTHONPATH=build/python python3 python/examples/lenet_quickstart.py [--samples N]
"""
import argparse
import subprocess

import loom
import loom.dataset as ds
import loom.dataset.vision as vision
from loom import nn, ops


class LeNet5(nn.Cell):
    def __init__(self, num_class=10, num_channel=1):
        super().__init__()
        self.conv1 = nn.Conv2d(num_channel, 6, 5, pad_mode="valid")
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid")
        self.fc1 = nn.Dense(16 * 5 * 5, 120)
        self.fc2 = nn.Dense(120, 84)
        self.fc3 = nn.Dense(84, num_class)
        self.relu = nn.ReLU()
        self.max_pool2d = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()

    def construct(self, x):
        x = self.max_pool2d(self.relu(self.conv1(x)))
        x = self.max_pool2d(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


def fashion_mnist_dir():
    out = subprocess.run(["dpkg", "-L", "dataset-fashion-mnist"], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.endswith("train-images-idx3-ubyte.gz"):
            return line.rsplit("/", 1)[0]
    return "/usr/share/datasets/fashion-mnist"


def create_dataset(usage, batch_size, samples):
    data = ds.MnistDataset(fashion_mnist_dir(), usage=usage)
    if samples:
        data = data.take(samples)
    data = data.map([vision.Pad([2]), vision.Rescale(1 / 255, 0),
                     vision.Normalize([0.2190], [0.3318]), vision.HWC2CHW()],
                    input_columns="image")
    if usage == "train":
        data = data.shuffle()
    return data.batch(batch_size, drop_remainder=usage == "train")


class StepCounter(loom.Callback):
    def __init__(self):
        self.steps = 0

    def on_train_step_end(self, run_context):
        self.steps += 1

    def on_train_epoch_end(self, run_context):
        cb = run_context.original_args()
        print(f"epoch {cb.cur_epoch_num}: {self.steps} steps, mean loss {cb.epoch_loss_mean:.4f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=0, help="train/test rows (0: all)")
    ap.add_argument("--epochs", type=int, default=1)
    a = ap.parse_args()
    loom.set_seed(1)
    net = LeNet5()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    model = loom.Model(net, loss, opt, metrics={"accuracy"})
    model.train(a.epochs, create_dataset("train", 32, a.samples), callbacks=[StepCounter()])
    print(model.eval(create_dataset("test", 32, a.samples)))


if __name__ == "__main__":
    main()
