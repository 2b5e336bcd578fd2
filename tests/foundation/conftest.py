import numpy as np
import pytest
import torch

from fedrepro.data.tensors import TensorData
from fedrepro.fl.loop import Checkpoint

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
    return TensorData(
        as_t(x[:240], torch.float32),
        as_t(y[:240], torch.long),
        as_t(x[240:], torch.float32),
        as_t(y[240:], torch.long),
        3,
    )


@pytest.fixture
def clients() -> list[np.ndarray]:
    """Six clients of unequal sizes over the 240 training samples."""
    order = np.random.default_rng(1).permutation(240)
    return np.split(order, [20, 50, 90, 140, 200])


def saved_rounds(monkeypatch) -> list[int]:
    """The rounds_done of every Checkpoint.save from now on (the saves still happen)."""
    rounds = []
    original = Checkpoint.save

    def recording(self, algorithm, rounds_done, rows):
        rounds.append(rounds_done)
        original(self, algorithm, rounds_done, rows)

    monkeypatch.setattr(Checkpoint, "save", recording)
    return rounds


class Killed(Exception):
    """Stands in for the job being killed."""


def killed_at(algorithm, t: int):
    """`algorithm` (anything `fedrepro.fl.loop.run_rounds` drives), made to die when it starts
    round `t`, after the checkpoints of the rounds before it."""
    run_round = algorithm.round

    def round_or_die(round_number):
        if round_number == t:
            raise Killed
        return run_round(round_number)

    algorithm.round = round_or_die
    return algorithm
