"""The model zoo: loom's C++ networks (models/), as Cells with MindSpore's parameter names.

    net = loom.models.lenet5()                                     # (N, 1, 32, 32) -> (N, 10)
    net = loom.models.resnet18(num_classes=10, in_channels=1, layout="small")
    net = loom.models.network("resnet18")              # what `loom train resnet18` trains

LeNet-5 is MindSpore's model zoo's (conv1.weight ... fc3.bias); the ResNets are the zoo's
resnet.py (conv1.weight, bn1.gamma, layer1.0.conv1.weight, ..., end_point.bias) in the ImageNet
layout (7x7 stride-2 stem and max-pool, for 224x224) or the small-image one (3x3 stride-1 stem,
no max-pool, for 28x28 / 32x32). Initial values are drawn from the seed in force
(loom.set_seed), so the same seed gives the same network as the loom command.
"""
from loom import _loom
from loom._loom import LeNet5, ResNet  # noqa: F401


def lenet5(num_classes=10, num_channel=1):
    """LeNet-5 on (N, num_channel, 32, 32) inputs: 8 parameters, 61,684 values by default."""
    return LeNet5(num_classes, num_channel)


def _resnet(depth, num_classes, in_channels, layout):
    return ResNet(depth, num_classes, in_channels, layout)


def resnet18(num_classes=10, in_channels=3, layout="imagenet"):
    """ResNet-18 (basic blocks); layout "imagenet" (224x224) or "small" (32x32)."""
    return _resnet(18, num_classes, in_channels, layout)


def resnet34(num_classes=10, in_channels=3, layout="imagenet"):
    """ResNet-34 (basic blocks); layout "imagenet" (224x224) or "small" (32x32)."""
    return _resnet(34, num_classes, in_channels, layout)


def resnet50(num_classes=10, in_channels=3, layout="imagenet"):
    """ResNet-50 (bottleneck blocks); layout "imagenet" (224x224) or "small" (32x32)."""
    return _resnet(50, num_classes, in_channels, layout)


def resnet101(num_classes=10, in_channels=3, layout="imagenet"):
    """ResNet-101 (bottleneck blocks); layout "imagenet" (224x224) or "small" (32x32)."""
    return _resnet(101, num_classes, in_channels, layout)


def names():
    """The zoo's model names, as the loom command takes them ("lenet", "resnet18"...)."""
    return list(_loom.zoo_names())


def network(name, dataset=None, num_classes=None):
    """The network `loom train NAME --dataset DATASET` trains (the recipe's default dataset when
    None; num_classes None: the dataset's), so that its checkpoints load into it."""
    return _loom.zoo_network(name, dataset or "", num_classes)


__all__ = ["lenet5", "resnet18", "resnet34", "resnet50", "resnet101", "names", "network",
           "LeNet5", "ResNet"]
