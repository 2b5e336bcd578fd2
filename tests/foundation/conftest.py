import numpy as np
import pytest
import torch

from fedrepro.data.tensors import TensorData

FEDAVG_SPEC = {
    "model": "mlp",
    "model_options": {"in_features": 16, "num_classes": 3, "hidden": [8]},
    "rounds": 6,
    "local_steps": 3,
    "batch_size": 8,
    "lr": 0.1,
    "participation": 0.5,
    "weighting": "size",
    "device": "cpu",
}


@pytest.fixture
def blobs() -> TensorData:
    """Three separable Gaussian blobs in 16 dimensions."""
    rng = np.random.default_rng(0)
    centres = rng.normal(0, 3, size=(3, 16))
    y = rng.integers(0, 3, size=300)
    x = centres[y] + rng.normal(size=(300, 16))
    as_t = lambda a, d: torch.as_tensor(a, dtype=d)  # noqa: E731
    return TensorData(as_t(x[:240], torch.float32), as_t(y[:240], torch.long),
                      as_t(x[240:], torch.float32), as_t(y[240:], torch.long), 3)


@pytest.fixture
def clients() -> list[np.ndarray]:
    """Six clients of unequal sizes over the 240 training samples."""
    order = np.random.default_rng(1).permutation(240)
    return np.split(order, [20, 50, 90, 140, 200])
