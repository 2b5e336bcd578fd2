"""Fixtures of the FedSC tests (no files under /work/shared are read)."""

import numpy as np
import pytest
import torch

from fedrepro.algorithms.fedsc.base import SSLData, channel_stats
from tests.fedsc.helpers import digits_arrays


@pytest.fixture(scope="session")
def tiny_digits():
    xt, yt, xe, ye = digits_arrays()
    clients = [
        torch.cat([torch.as_tensor(np.flatnonzero(yt == c)), torch.as_tensor(np.flatnonzero(yt == c + 1))])
        for c in range(0, 10, 2)
    ]  # 5 clients x 2 classes (the SVHN split)
    mean, std = channel_stats(xt)
    return SSLData(
        torch.as_tensor(xt),
        torch.as_tensor(yt).long(),
        torch.as_tensor(xe),
        torch.as_tensor(ye).long(),
        clients,
        10,
        mean,
        std,
    )
