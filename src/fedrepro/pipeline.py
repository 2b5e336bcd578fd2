"""The bridge between Snakemake rules and the package.

Every rule runs `workflow/scripts/entry.py`, which calls `run_snakemake_job`.
That builds a `Job` from the rule's named inputs, outputs and params and calls
the function named by `params.entry`. Jobs are plain data, so tests build them
with `make_job` and call the same functions without Snakemake.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedrepro.atomic import atomic_write_text
from fedrepro.codedeps import BOOKKEEPING, FINGERPRINT_SUFFIX, code_hash, module_file, parse_fingerprint, script_hash
from fedrepro.options import DETERMINISTIC_ENV, EVERY_ENV, MINUTES_ENV
from fedrepro.registry import resolve

CHECKPOINT_DIR = ".checkpoint"
FINGERPRINT = "fingerprint.json"
log = logging.getLogger(__name__)


def seed_tag(seeds: list[int]) -> str:
    """The `{seeds}` wildcard of a job: [0, 1] -> "s0_1"."""
    return "s" + "_".join(str(s) for s in seeds)


def number_tag(value: float) -> str:
    """A compact, filesystem-safe number for setting tags: 0.5 -> '0.5', 1e-05 -> '1e-05', inf -> 'inf'."""
    if value == float("inf") or value == "inf":
        return "inf"
    return f"{float(value):g}"


def parse_seed_tag(tag: str) -> list[int]:
    """Inverse of `seed_tag`: "s0_1" -> [0, 1]."""
    if not tag.startswith("s") or not all(p.isdigit() for p in tag[1:].split("_")):
        raise ValueError(f"seed tag {tag!r} must look like 's0_1_2'")
    return [int(p) for p in tag[1:].split("_")]


def seed_batches(seeds: list[int], per_job: int) -> list[list[int]]:
    """Split a seed list into jobs of at most `per_job` seeds each."""
    return [seeds[i : i + per_job] for i in range(0, len(seeds), per_job)]


@dataclass
class CodeRecord:
    """The code a job started with (`record_code`, called by `run_job` before the job computes): the text of
    each of its code inputs (fingerprint files shared by every parse of the workflow on this results folder,
    by any checkout: one may rewrite them while the job runs) and the (time, size) of the source file of each
    module and workflow script they list. What the job stores is keyed by this record (`fingerprint`), never by
    the files read again; `code_moved` compares it with what is there now."""

    texts: dict[str, str]
    sources: dict[str, tuple[int, int] | None] = field(default_factory=dict)

    def planned(self) -> dict[str, str]:
        """{module or workflow script: hash} of the code inputs as the job started."""
        return {name: hash_ for text in self.texts.values() for name, hash_ in parse_fingerprint(text).items()}


@dataclass
class Job:
    """Everything one pipeline job needs; see docs/architecture.md."""

    spec: dict[str, Any]
    output: dict[str, str]
    input: dict[str, Any] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=list)
    log: str | None = None
    threads: int = 1
    wildcards: dict[str, str] = field(default_factory=dict)
    scratch: Path = Path(".")
    script: str | None = None  # the workflow script this process runs (workflow/scripts/entry.py)
    results: str | None = None  # the results folder (config `results`): stored keys name inputs relative to it
    code: CodeRecord | None = None  # the code the job started with (run_job); None: read the code inputs

    def out(self, name: str) -> Path:
        """Path of the named output, with its folder created."""
        path = Path(self.output[name])
        path.parent.mkdir(parents=True, exist_ok=True)
        return path


def scratch_for(output_path: str) -> Path:
    """Checkpoint folder of a job, beside its outputs but not one of them, so a failed job keeps it."""
    return Path(output_path).parent / CHECKPOINT_DIR


def input_paths(job: Job) -> list[str]:
    """Every input file of a job (named inputs may be one path or a list of paths)."""
    paths = []
    for value in job.input.values():
        paths += [str(value)] if isinstance(value, (str, os.PathLike)) else [str(v) for v in value]
    return sorted(paths)


def fingerprint(job: Job, seeds: bool = True) -> str:
    """What a job's scratch results depend on: its spec, its seeds (unless `seeds=False`: what
    one seed's results depend on) and the state of every input file, named relative to the results
    folder (a moved or copied folder keeps its keys): a large file's (size, time), a small one's content,
    the code inputs' as the job started (`job.code`). A touched input changes it too: that only costs a
    recompute."""
    files = {_key_path(path, job.results): _file_state(path, job.code) for path in input_paths(job)}
    state = {"spec": job.spec, "inputs": files, **({"seeds": job.seeds} if seeds else {})}
    return json.dumps(state, sort_keys=True, default=str)


def _key_path(path: str, results: str | None) -> str:
    """`path` relative to the results folder `results` where it lies inside it."""
    if results is None:
        return path
    relative = os.path.relpath(os.path.abspath(path), os.path.abspath(results))
    return path if relative.startswith("..") else Path(relative).as_posix()


SMALL_FILE = 1 << 16  # files up to this size (code fingerprints, JSON) are compared by content


def _file_state(path: str, code: CodeRecord | None = None) -> list[int] | str | None:
    """A small file's content hash (a code fingerprint rewritten with the same content stays
    the same; a code input as `code` recorded it), a large file's (size, time)."""
    if code is not None and path in code.texts:
        return hashlib.sha256(code.texts[path].encode()).hexdigest()
    try:
        state = os.stat(path)
    except FileNotFoundError:
        return None
    if state.st_size <= SMALL_FILE:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return [state.st_size, state.st_mtime_ns]


def claim_scratch(job: Job) -> None:
    """Keep the scratch folder (checkpoints, finished seeds) only if this very job wrote it.

    Snakemake re-runs a job when its params, code or inputs changed, and deletes only its
    outputs: finished seeds left in scratch by the old settings would otherwise be reused.
    Every job that keeps state in its scratch folder calls this before reading it.
    """
    marker = job.scratch / FINGERPRINT
    current = fingerprint(job)
    if marker.exists() and marker.read_text() == current:
        return
    if job.scratch.exists():
        log.info("%s was written for other settings or inputs: starting afresh", job.scratch)
        shutil.rmtree(job.scratch)
    job.scratch.mkdir(parents=True)
    atomic_write_text(marker, current)


def make_job(spec, output, input=None, seeds=None, **kwargs) -> Job:
    """A job for tests and interactive use; scratch lies beside the first output."""
    first = str(next(iter(output.values())))
    return Job(
        spec=spec,
        output=dict(output),
        input=dict(input or {}),
        seeds=list(seeds or []),
        scratch=scratch_for(first),
        **kwargs,
    )


def _named(io) -> dict[str, Any]:
    """Snakemake's Namedlist as a plain dict (unnamed entries are dropped)."""
    return {name: io[name] for name in io.keys()}


def job_from_snakemake(smk, script: str | None = None) -> Job:
    """Build a Job from the `snakemake` object of a script directive run from file `script`."""
    wildcards = _named(smk.wildcards)
    return Job(
        spec=smk.params.get("spec", {}) or {},
        output=_named(smk.output),
        input=_named(smk.input),
        seeds=parse_seed_tag(wildcards["seeds"]) if "seeds" in wildcards else [],
        log=str(smk.log[0]) if len(smk.log) else None,
        threads=smk.threads,
        wildcards=wildcards,
        scratch=scratch_for(str(smk.output[0])),
        script=script,
        results=str(smk.config["results"]) if "results" in smk.config else None,
    )


@contextlib.contextmanager
def logging_to(path: str | None):
    """Send logging, stdout and stderr (tqdm included) to the job's log file."""
    if path is None:
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", buffering=1) as stream, contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            yield
        finally:
            root.removeHandler(handler)


def _code_inputs(job: Job) -> list[str]:
    """The job's code inputs: every fingerprint file among its inputs (fedrepro.codedeps)."""
    return [path for path in input_paths(job) if path.endswith(FINGERPRINT_SUFFIX)]


def planned_code(job: Job) -> dict[str, str]:
    """{module or workflow script: hash} of the code Snakemake planned the job with (its code
    inputs, fedrepro.codedeps) as the job started (`job.code`), else as they are now; a fingerprint file
    that is gone gives nothing."""
    return (job.code or read_code(job)).planned()


def read_code(job: Job) -> CodeRecord:
    """The job's code inputs as they are now (no source states)."""
    texts = {}
    for path in _code_inputs(job):
        try:
            texts[path] = Path(path).read_text()
        except FileNotFoundError:
            continue
    return CodeRecord(texts)


def record_code(job: Job) -> CodeRecord:
    """The code the job starts with: its code inputs and the state of every source file they list. The
    states come first, so an edit after `stale_code` has hashed a file changes its state."""
    record = read_code(job)
    record.sources = {name: _source_state(job, name) for name in record.planned()}
    return record


def _source_state(job: Job, name: str) -> tuple[int, int] | None:
    path = _source(job, name)
    try:
        state = os.stat(path) if path else None
    except FileNotFoundError:
        return None
    return (state.st_mtime_ns, state.st_size) if state else None


def _source(job: Job, name: str) -> Path | None:
    """The file this process runs for fingerprint line `name`: a module's source, or the workflow script the
    job runs (`job.script`) for a script line of that name."""
    if "/" in name:  # a workflow script, by its path in the workflow
        return Path(job.script) if job.script and Path(job.script).as_posix().endswith(f"/{name}") else None
    return module_file(name)


def _current_hash(job: Job, name: str) -> str | None:
    path = _source(job, name)
    if path is None:
        return None
    return script_hash(path) if "/" in name else code_hash(name)


def undeclared_imports(job: Job) -> list[str]:
    """fedrepro modules this process imported that the job's code inputs do not list
    (fedrepro.codedeps derives that list; a miss means an edit there would not re-run the job)."""
    declared = set(planned_code(job)) | set(BOOKKEEPING)
    imported = {name for name in sys.modules if name == "fedrepro" or name.startswith("fedrepro.")}
    return sorted(imported - declared - {"fedrepro.codedeps"})


def stale_code(job: Job) -> list[str]:
    """The job's code modules (and the workflow script it runs, `job.script`) whose code, as this
    process runs it, differs from the fingerprint Snakemake planned the job with: edited after the
    workflow was parsed (hours earlier on a busy cluster), or fingerprinted by another checkout sharing
    the results folder. A result made now would be recorded under code that did not make it."""
    stale = []
    for name, planned in planned_code(job).items():
        if "/" in name and _source(job, name) is None:
            continue  # a script this process does not run (outside Snakemake)
        if _current_hash(job, name) != planned:
            stale.append(name)
    return stale


def code_moved(job: Job, fingerprints: bool = True) -> list[str]:
    """What no longer matches the code the job started with (`job.code`): with `fingerprints`, the code inputs
    that a parse of the workflow rewrote since (by this checkout after an edit, or by another sharing the
    results folder): Snakemake would take the job's outputs as made by the new code; and the modules this
    process imported (a module imported inside a function is read when first called) and the script it runs
    whose source changed in code since (compared by time and size, then by hash)."""
    record = job.code
    if record is None:
        return []
    moved = [path for path in record.texts if fingerprints and _text_or_none(path) != record.texts[path]]
    planned = record.planned()
    for name, state in record.sources.items():
        imported = "/" in name or name.removesuffix(".__labels__") in sys.modules
        if imported and _source_state(job, name) != state and _current_hash(job, name) != planned[name]:
            moved.append(name)
    return moved


def _text_or_none(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        return None


class CodeMoved(RuntimeError):
    """The code a job started with is no longer the workflow's (`code_moved`)."""


def require_code(job: Job, fingerprints: bool = True) -> None:
    """Raise CodeMoved naming what `code_moved(job, fingerprints)` finds."""
    moved = code_moved(job, fingerprints)
    if moved:
        raise CodeMoved(
            f"the code of {', '.join(moved)} changed while this job ran (edited, or the workflow parsed with other "
            "code by this or another checkout sharing the results folder): its results are not filed under the "
            "new code; run snakemake again so that it plans the job with the code that will run it"
        )


def corrupt_inputs(job: Job) -> dict[str, str]:
    """Input files that cannot be read back (a truncated .npz, .json or .parquet), with why."""
    import zipfile

    bad = {}
    for path in input_paths(job):
        try:
            if path.endswith(".npz"):
                with zipfile.ZipFile(path) as archive:
                    broken = archive.testzip()
                if broken:
                    raise ValueError(f"member {broken} fails its CRC check")
            elif path.endswith(".json"):
                json.loads(Path(path).read_text())
            elif path.endswith(".parquet"):
                import pyarrow.parquet

                pyarrow.parquet.read_metadata(path)
        except FileNotFoundError:
            continue
        except Exception as error:  # noqa: BLE001 (any failure to read it back)
            bad[path] = f"{type(error).__name__}: {error}"
    return bad


# The log line of a finished job's CPU time (benchmarks/run_cost.py reads it).
CPU_LINE = "cpu-seconds:"


def cpu_seconds() -> float:
    """CPU time of this process and of the processes it waited for, since it started."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def run_job(job: Job, entry: str) -> None:
    """Run `entry` on `job` with logging to the job's log. A failure's traceback goes to that
    log; an input file that cannot be read back is named there and removed, so the next
    `snakemake` rebuilds it (with its producer) instead of failing on it forever. The log's CPU_LINE
    splits a finished job's CPU time into the process start with its imports and the work. Before the job,
    its code must be the code it was planned with (`stale_code`); that code, recorded once (`job.code`), keys
    whatever the job stores. After it, the code must still be that (`require_code`): else its outputs are
    removed and it fails, so that Snakemake plans it again. Every fedrepro module it imported must be one of
    its code inputs: a warning names any that is not, and FEDREPRO_STRICT_IMPORTS=1 (the tests) makes that
    an error."""
    with logging_to(job.log):
        logger = logging.getLogger("fedrepro")
        logger.info("entry %s, spec %s, seeds %s", entry, job.spec, job.seeds)
        try:
            job.code = record_code(job)
            stale = stale_code(job)
            if stale:
                raise RuntimeError(
                    f"the code of {', '.join(stale)} changed after Snakemake planned this job (or another "
                    "checkout sharing this results folder fingerprinted it); run snakemake again so that it "
                    "plans the job with the code that will run it"
                )
            function = resolve(entry)
            started = cpu_seconds()  # the process's start, Snakemake's preamble and the entry's imports
            function(job)
            logger.info("%s start+imports %.2f, work %.2f", CPU_LINE, started, cpu_seconds() - started)
            _require_code_at_end(job)
            missing = undeclared_imports(job) if "code" in job.input else []
            if missing:
                message = f"job imported fedrepro modules missing from its code inputs: {missing}"
                if os.environ.get("FEDREPRO_STRICT_IMPORTS") == "1":
                    raise RuntimeError(message)
                logger.warning(message)
        except BaseException:
            logger.exception("job failed (entry %s)", entry)
            for path, why in corrupt_inputs(job).items():
                logger.error("input %s is corrupt (%s): removed, run snakemake again to rebuild it", path, why)
                Path(path).unlink(missing_ok=True)
            raise


def _require_code_at_end(job: Job) -> None:
    """`require_code`, removing the job's outputs first when it fails (Snakemake removes a failed job's outputs
    too, unless told to keep them)."""
    try:
        require_code(job)
    except CodeMoved:
        for path in map(Path, job.output.values()):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        raise


def hand_over_process_settings(config: dict) -> None:
    """Top-level keys that change no job's numbers reach the job's process as environment variables,
    not through its params.spec, so changing them re-runs nothing: `checkpoint_every` and
    `checkpoint_minutes` (checkpoint policy, fedrepro.fl.loop.Checkpoint) and `deterministic`
    (deterministic GPU kernels, fedrepro.fl.device)."""
    if config.get("checkpoint_every") is not None:
        os.environ[EVERY_ENV] = str(config["checkpoint_every"])
    if config.get("checkpoint_minutes") is not None:
        os.environ[MINUTES_ENV] = str(config["checkpoint_minutes"])
    if config.get("deterministic"):
        os.environ[DETERMINISTIC_ENV] = "1"


def run_snakemake_job(smk, script: str | None = None) -> None:
    """Entry point of workflow/scripts/entry.py (`script`: that file, as Snakemake ran it)."""
    job = job_from_snakemake(smk, script)
    threads = max(1, int(job.threads))
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    hand_over_process_settings(smk.config)
    run_job(job, smk.params.entry)
    leave()


def leave() -> None:
    """End a finished job's process without the interpreter's teardown, which frees every object of torch,
    pandas and the job one by one: 0.7 CPU-s of a process that imported them (2.7 CPU-s in all against 2.0 with
    os._exit, measured), about 13 % of a default run's CPU. Every output is written and closed by now
    (fedrepro.atomic, the table and figure writers); the streams and the log handlers are flushed here."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
