"""Architectures by name.

`build_model(name, **kwargs)` is the only way the rest of the code creates a
network. Each entry points at the module that defines it; a new architecture is
one function in one module and one line here.

Convention for classifiers: the builder takes `in_channels` (or `in_features`),
`num_classes` and keyword options; `num_classes=0` returns the feature
extractor only, whose output width is `model.feature_dim`.
"""

from __future__ import annotations

from fedrepro.registry import lookup

MODELS: dict[str, str] = {
    # generic small models (fedrepro.models.small)
    "logreg": "fedrepro.models.small:logistic_regression",
    "mlp": "fedrepro.models.small:mlp",
    "small_cnn": "fedrepro.models.small:small_cnn",
    # FedAL client pools
    "lenet5": "fedrepro.models.lenet:lenet5",
    "wrn10_1": "fedrepro.models.wide_resnet:wrn10_1",
    "wrn10_2": "fedrepro.models.wide_resnet:wrn10_2",
    "wrn16_1": "fedrepro.models.wide_resnet:wrn16_1",
    "resnet18": "fedrepro.models.resnet_cifar:resnet18",
    "resnet34": "fedrepro.models.resnet_cifar:resnet34",
    "leaf_cnn": "fedrepro.models.leaf_cnn:leaf_cnn",
    # FedSC encoders
    "fixup_resnet20": "fedrepro.models.fixup_resnet:fixup_resnet20",
    # DPZV vertical-FL parts
    "vfl_mnist_cnn": "fedrepro.models.vfl:mnist_client_cnn",
    "vfl_cifar_cnn": "fedrepro.models.vfl:cifar_client_cnn",
    "vfl_resnet18": "fedrepro.models.vfl:resnet18_client",
    "vfl_text_encoder": "fedrepro.models.vfl:text_client_encoder",
    "vfl_server": "fedrepro.models.vfl:server_head",
}


def build_model(name: str, **kwargs):
    """Build the architecture registered as `name` with its keyword arguments."""
    return lookup(MODELS, name, "model")(**kwargs)
