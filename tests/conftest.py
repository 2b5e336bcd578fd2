"""Test order for `make test` (pytest-xdist, two workers, one test file per worker at a time).

The paper-scale smoke test keeps both cores busy for most of the run, and the SLURM tests mostly
wait on the cluster; both go first so that the other worker's short tests fill the gaps instead of
leaving the smoke test to run alone at the end.
"""

import os

import pytest

from fedrepro.options import DETERMINISTIC_ENV, EVERY_ENV, MINUTES_ENV

# what fedrepro.pipeline.hand_over_process_settings and fedrepro.fl.device write into os.environ
PROCESS_SETTINGS = (EVERY_ENV, MINUTES_ENV, DETERMINISTIC_ENV, "CUBLAS_WORKSPACE_CONFIG")

FIRST = ("tests/paperscale/test_smoke.py", "tests/cluster/test_slurm.py")


def _rank(item) -> int:
    path = item.nodeid.split("::")[0]
    return FIRST.index(path) if path in FIRST else len(FIRST)


def pytest_collection_modifyitems(items):
    items.sort(key=_rank)  # stable: every other test keeps its collection order


@pytest.fixture(autouse=True)
def process_settings_restored():
    """A test that hands settings to its own process (as a job does) leaves the next test in the same
    worker the environment it found: a leaked checkpoint_every of 2 once changed another test's checkpoints."""
    before = {name: os.environ.get(name) for name in PROCESS_SETTINGS}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
