"""The `deterministic` key: from the config to the job's process to torch's switches (checked on the CPU;
on a GPU the same switches make cuDNN and cuBLAS deterministic)."""

import os

import pytest
import torch

from fedrepro.fl.device import apply_determinism, pick_device
from fedrepro.options import DETERMINISTIC_ENV
from fedrepro.pipeline import hand_over_process_settings


@pytest.fixture
def restore_torch(monkeypatch):
    monkeypatch.delenv(DETERMINISTIC_ENV, raising=False)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic)
    before_benchmark = torch.backends.cudnn.benchmark
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[1], before_benchmark


def test_the_config_key_reaches_the_job_process_and_its_device_pick_switches_torch(restore_torch):
    hand_over_process_settings({"deterministic": True})
    assert os.environ[DETERMINISTIC_ENV] == "1"
    pick_device("cpu")
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_off_by_default_leaves_torch_as_it_is(restore_torch):
    hand_over_process_settings({"deterministic": False, "checkpoint_minutes": None})
    assert DETERMINISTIC_ENV not in os.environ
    assert apply_determinism() is False
    assert not torch.are_deterministic_algorithms_enabled()
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
