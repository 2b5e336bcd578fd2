"""Shared by every test file: the order of files for `make test`, one paper-scale dry run for all
the files that read it, and the process settings each test gets back.

Order (pytest-xdist, two workers, one test file per worker at a time, --dist loadfile): the longest
files first, so that the short ones fill the gaps at the end instead of one long file running alone
after the rest. The SLURM tests mostly wait on the cluster; the re-run tests share its local slice
(tests/cluster/conftest.py) and go to the other worker.
"""

import fcntl
import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from fedrepro.bytecode import cache_byte_code

cache_byte_code()  # before torch: this process and the Snakemake runs it starts read compiled byte code

import torch  # noqa: E402

from fedrepro.options import DETERMINISTIC_ENV, EVERY_ENV, MINUTES_ENV  # noqa: E402
from tests import limits  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# what fedrepro.pipeline.hand_over_process_settings and fedrepro.fl.device write into os.environ
PROCESS_SETTINGS = (EVERY_ENV, MINUTES_ENV, DETERMINISTIC_ENV, "CUBLAS_WORKSPACE_CONFIG")

FIRST = (  # the longest files, longest first (`make test --durations`); the rest keep collection order
    "tests/paperscale/test_smoke.py",  # `make smoke`; `make test` leaves it out
    "tests/cluster/test_slurm.py",
    "tests/cluster/test_reruns.py",
    "tests/foundation/test_pipeline.py",
    "tests/fedal/test_pipeline.py",
    "tests/privacy/test_audit.py",
    "tests/foundation/test_add_method.py",
    "tests/figures/test_figures.py",
    "tests/dpzv/test_bert.py",
)


def _rank(item) -> int:
    path = item.nodeid.split("::")[0]
    return FIRST.index(path) if path in FIRST else len(FIRST)


def pytest_collection_modifyitems(items):
    items.sort(key=_rank)  # stable: every other test keeps its collection order


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item, settings):
    """pytest-timeout's limits (pyproject.toml `timeout`, `@pytest.mark.timeout`) in idle-machine seconds
    (tests/limits.py): past the limit, pytest-timeout's own signal handler fails the test with its stacks."""
    if threading.current_thread() is not threading.main_thread():
        return None  # pytest-timeout's own timer
    import pytest_timeout

    def handler(signum, frame):
        __tracebackhide__ = True
        pytest_timeout.timeout_sigalrm(item, settings)

    signal.signal(signal.SIGALRM, handler)
    main = threading.main_thread().ident
    watchdog = limits.Watchdog(settings.timeout, lambda: signal.pthread_kill(main, signal.SIGALRM))

    def cancel():
        watchdog.stop()
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel
    return True


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


@pytest.fixture
def float64():
    """float64 as the default dtype for one test (exact comparisons against an independent computation),
    the previous default restored after it; a module opts in with pytestmark = pytest.mark.usefixtures("float64")."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def shared_folder(tmp_path_factory) -> Path:
    """A folder every xdist worker of this test session sees (the parent of the workers' own)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once_per_session(tmp_path_factory, name: str, make) -> dict:
    """`make()` (a JSON-able result) computed by the first worker that asks, under a file lock; the
    other workers read it: a costly Snakemake run is paid once per test session, not once per worker."""
    folder = shared_folder(tmp_path_factory)
    cache = folder / f"{name}.json"
    with open(folder / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not cache.exists():
            cache.write_text(json.dumps(make()))
    return json.loads(cache.read_text())


PAPER_CONFIG = [str(ROOT / "config.yaml"), str(ROOT / "configs/paper.yaml")]
SLURM_PROFILES = ["--profile", str(ROOT / "profiles/slurm"), "--profile", str(ROOT / "profiles/slurm-ci")]


@pytest.fixture(scope="session")
def paper_dry_run(tmp_path_factory) -> dict:
    """One dry run of the paper-scale configuration (config.yaml + configs/paper.yaml, every paper,
    target all) through the SLURM profiles, in an empty working folder: {"rc", "stdout", "stderr"}.
    Each job's block shows its inputs and its resources as they would go to sbatch, and the job
    stats table counts the jobs per rule. The DAG check, the SLURM routing, the cost planner and the
    BERT staging tests all read it: at paper scale each dry run cost 25-40 s under load."""

    def run() -> dict:
        work = shared_folder(tmp_path_factory) / "paper_dry_run"
        work.mkdir(exist_ok=True)
        command = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "workflow" / "Snakefile"), "-n"]
        command += ["--configfile", *PAPER_CONFIG, *SLURM_PROFILES]
        result = limits.run(command, cwd=work, capture_output=True, text=True, timeout=900)
        return {"rc": result.returncode, "stdout": result.stdout, "stderr": result.stderr}

    return once_per_session(tmp_path_factory, "paper_dry_run", run)
