"""Test order for `make test` (pytest-xdist, two workers, one test file per worker at a time).

The paper-scale smoke test keeps both cores busy for most of the run, and the SLURM tests mostly
wait on the cluster; both go first so that the other worker's short tests fill the gaps instead of
leaving the smoke test to run alone at the end.
"""

FIRST = ("tests/paperscale/test_smoke.py", "tests/cluster/test_slurm.py")


def _rank(item) -> int:
    path = item.nodeid.split("::")[0]
    return FIRST.index(path) if path in FIRST else len(FIRST)


def pytest_collection_modifyitems(items):
    items.sort(key=_rank)  # stable: every other test keeps its collection order
