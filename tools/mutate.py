"""Mutation testing of the algorithm, privacy, FL-loop and evaluation code (issue 13), with mutmut 3.

Each module is mutated against its own tests only, in a scratch copy of the repository, so the
working tree is never modified. mutmut records which tests call each function and runs only
those tests against that function's mutants.

    python tools/mutate.py                          # every module, smallest first
    python tools/mutate.py --module algorithms/dpzv # one module
    python tools/mutate.py --table-only             # only regenerate the table in docs/testing.md

mutmut generates the mutants and records which tests call each function; the mutants are then run by
`warm_run`: one interpreter imports torch, pytest, the mutated package and the module's tests once
(pytest --collect-only), and forks a child per mutant that runs the mutant's covering tests, instead of a
cold pytest per mutant (15-28 CPU-s of imports each on 2 busy cores).

Each module's latest result is written to benchmarks/mutation/results/<module>.json and the
per-module table between the markers in docs/testing.md is regenerated from all of them.
Equivalent mutants (no test can kill them: the program's behaviour is unchanged) are listed in
benchmarks/mutation/equivalent.tsv with a one-line reason each and left out of the denominator.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "mutation" / "results"
EQUIVALENT = REPO / "benchmarks" / "mutation" / "equivalent.tsv"
DOC = REPO / "docs" / "testing.md"
START, END = "<!-- mutation-table:start -->", "<!-- mutation-table:end -->"

# module (under src/fedrepro) -> its own tests. Privacy also gets each paper's privacy tests.
MODULES = {
    "privacy": [
        "tests/privacy",
        "tests/dpzv/test_privacy_dpzv.py",
        "tests/dpzv/test_records.py",
        "tests/dpzv/test_mechanisms.py",
        "tests/fedsc/test_accounting.py",
        "tests/fedsc/test_server_dp.py",
        "tests/fedsc/test_mechanisms.py",
        "tests/steffle/test_privacy_and_baselines.py",
        "tests/steffle/test_privacy_mechanism.py",
    ],
    "eval": [
        "tests/foundation/test_health.py",
        "tests/foundation/test_tables.py",
        "tests/foundation/test_eval_units.py",
        "tests/steffle/test_fairness_metrics.py",
        "tests/fedsc/test_parts.py",
    ],
    "fl": ["tests/foundation"],
    "algorithms/fedavg": ["tests/foundation"],
    "algorithms/steffle": ["tests/steffle"],
    "algorithms/dpzv": ["tests/dpzv"],
    "algorithms/fedal": ["tests/fedal"],
    "algorithms/fedsc": ["tests/fedsc"],
}
# What the scratch copy needs besides src/ and tests/: tests read configs relative to the repo root.
ALSO_COPY = ["config.yaml", "configs", "workflow", "profiles"]
# Tests that run Snakemake in a subprocess import the installed package, never the mutant: skip them
# (markers "pipeline" and "paperscale").
PYTEST_ARGS = ["-p", "no:cacheprovider", "-m", "not pipeline and not paperscale", "-q"]
# Lines not mutated: the text of an error, warning or log message is not behaviour (the condition
# that raises is on another line and is mutated).
DO_NOT_MUTATE = [r"^\s*raise ", r"^\s*warnings\.warn\(", r"^\s*print\(", r"^\s*(log|logger)\.\w+\("]
NO_SUCH_MUTANT = "fedrepro_mutate_generate_only"

# mutmut's exit codes -> the table's columns (mutmut.stats.status_by_exit_code).
STATUS = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    35: "suspicious",
    36: "timeout",
    -24: "timeout",
    24: "timeout",
    152: "timeout",
    255: "timeout",
    -11: "segfault",
    -9: "segfault",
    37: "killed",
    None: "not checked",
}


def slug(module: str) -> str:
    return module.replace("/", "_")


def read_equivalent() -> dict[str, tuple[str, str]]:
    """mutant name -> (its mutated line, reason), from benchmarks/mutation/equivalent.tsv.

    One mutant per line, three tab-separated fields: name, the mutated line as the diff shows it
    (without the leading "+"), why no test can kill it. Lines starting with # are comments.
    """
    out = {}
    if EQUIVALENT.exists():
        for line in EQUIVALENT.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                fields = line.split("\t")
                if len(fields) != 3 or not fields[2].strip():
                    sys.exit(f"{EQUIVALENT}: {line!r} is not 'name<TAB>mutated line<TAB>reason'")
                out[fields[0].strip()] = (fields[1].strip(), fields[2].strip())
    return out


STRING = re.compile(r"""(?:[rbuf]{0,2})("[^"]*"|'[^']*')""", re.I)


def text_only(diff: str) -> bool:
    """True when the mutant changes nothing but the text inside string literals (e.g. a message)."""
    minus = [l[1:] for l in diff.splitlines() if l.startswith("-") and not l.startswith("---")]
    plus = [l[1:] for l in diff.splitlines() if l.startswith("+") and not l.startswith("+++")]

    def norm(lines):
        return [STRING.sub('""', line).strip() for line in lines]

    return bool(minus) and norm(minus) == norm(plus)


def mutated_line(diff: str) -> str:
    return " ".join(l[1:].strip() for l in diff.splitlines() if l.startswith("+") and not l.startswith("+++"))


def module_tests(root: Path, module: str) -> list[str]:
    """The module's tests that exist in `root` (an older tree may lack the newest test files)."""
    return [t for t in MODULES[module] if (root / t).exists()]


def mutmut_section(module: str, tests: list[str]) -> str:
    """The [tool.mutmut] section of the scratch copy (TOML; JSON string arrays are valid TOML)."""
    rows = {
        "source_paths": ["src"],
        "only_mutate": [f"src/fedrepro/{module}/*"],
        "pytest_add_cli_args": PYTEST_ARGS,
        "pytest_add_cli_args_test_selection": tests,
        "also_copy": ALSO_COPY,
        "do_not_mutate_patterns": DO_NOT_MUTATE,
    }
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in rows.items())
    # torch is not fork-safe once its thread pools exist: fork workers from a clean server process.
    return f'[tool.mutmut]\n{body}\nprocess_isolation = "forkserver"\nuse_git_change_detection = false\n'


def prepare(root: Path, work: Path, module: str) -> None:
    if work.exists():
        shutil.rmtree(work)  # a fresh run every time: the result is that of the tree as it is now
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    shutil.copytree(root / "src", work / "src", ignore=ignore)
    shutil.copytree(root / "tests", work / "tests", ignore=ignore)
    for name in ALSO_COPY:
        src = root / name
        if src.is_dir():
            shutil.copytree(src, work / name, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, work / name)
    text = (root / "pyproject.toml").read_text()
    text = re.sub(r"(?ms)^\[tool\.mutmut\].*?(?=^\[|\Z)", "", text)  # the repo's own section, if any
    (work / "pyproject.toml").write_text(text.rstrip() + "\n\n" + mutmut_section(module, module_tests(root, module)))


def all_mutant_names(work: Path, module: str) -> list[str]:
    names = []
    for meta in sorted((work / "mutants/src/fedrepro" / module).rglob("*.py.meta")):
        names += list(json.loads(meta.read_text())["exit_code_by_key"])
    return names


def run_mutmut(
    work: Path, module: str, jobs: int, budget_s: float, sample: int, seed: int, log: Path
) -> tuple[float, bool, list[str] | None]:
    """Run mutmut in `work`; stop it (verdicts so far are kept) after budget_s seconds.

    A first pass only generates the mutants and records which tests cover which function (mutmut
    stops at the unknown mutant name); then `warm_run` runs every mutant or, with sample > 0, a
    seeded uniform sample. Returns (wall seconds, stopped at the budget, the sample or None for all).
    """
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0")
    mutmut = [str(Path(sys.executable).with_name("mutmut")), "run", "--max-children", str(jobs)]
    start = time.monotonic()
    stopped = False
    with open(log, "w") as fh:

        def call(extra: list[str], timeout: float) -> bool:
            proc = subprocess.Popen(
                mutmut + extra, cwd=work, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                proc.wait(timeout=max(timeout, 1.0))
                return False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGTERM)  # mutmut saves every verdict as it comes in
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                return True

        stopped = call([NO_SUCH_MUTANT], budget_s)  # mutants and the tests of each function, no mutant run
        names = all_mutant_names(work, module)
        chosen = sorted(random.Random(seed).sample(names, min(sample, len(names)))) if sample > 0 else names
        if not stopped:
            command = [sys.executable, str(Path(__file__).resolve()), "--serve", str(work / "mutants")]
            command += ["--jobs", str(jobs), "--budget-s", str(budget_s - (time.monotonic() - start))]
            (work / "mutants" / WARM_NAMES).write_text(json.dumps(chosen))
            stopped = subprocess.run(command, env=env, stdout=fh, stderr=subprocess.STDOUT).returncode == STOPPED
    return time.monotonic() - start, stopped, chosen if sample > 0 else None


WARM_NAMES = "fedrepro-warm-names.json"  # the mutants `warm_run` runs, in the scratch copy's mutants/
STOPPED = 3  # exit status of `--serve` when the budget ran out
TIMEOUT = 36  # mutmut's exit code of a timed-out mutant (STATUS)
NO_TESTS = 33
# a mutant's CPU-time limit: factor x its tests' recorded time + seconds; a wall-time limit of HANG x that catches
# a child that waits forever without using CPU (CPU time does not grow on a busy machine, wall time does)
TIMEOUT_FACTOR, TIMEOUT_SECONDS, HANG = 3.0, 30.0, 10.0


def mutant_meta_files(mutants: Path) -> dict[str, Path]:
    """mutant name -> the .meta file (mutmut's, beside the mutated copy) that holds its verdict."""
    return {
        name: meta for meta in mutants.rglob("*.py.meta") for name in json.loads(meta.read_text())["exit_code_by_key"]
    }


def record(meta: Path, name: str, code: int, seconds: float) -> None:
    data = json.loads(meta.read_text())
    data["exit_code_by_key"][name], data["durations_by_key"][name] = code, round(seconds, 3)
    meta.write_text(json.dumps(data, indent=4))


def run_mutant(name: str, tests: list[str], cpu_limit: float) -> None:
    """In a forked child: switch mutant `name` on (mutmut's trampolines read MUTANT_UNDER_TEST at each
    call), run its covering tests, fastest first, stop at the first failure; exit with pytest's status."""
    import resource

    import pytest

    os.environ["MUTANT_UNDER_TEST"] = name
    resource.setrlimit(resource.RLIMIT_CPU, (int(cpu_limit), int(cpu_limit) + 1))
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1), os.dup2(null, 2)
    code = pytest.main(["--rootdir=.", "--tb=no", "-x", "-q", "-p", "no:randomly", *tests, *PYTEST_ARGS])
    os._exit(int(code))


def warm_run(mutants: Path, names: list[str], jobs: int, budget_s: float) -> bool:
    """Run `names` in mutmut's scratch folder `mutants` from one warm interpreter: import the mutated
    package and collect the tests once (torch and pytest included; one OpenMP thread, so that forking is
    safe), then fork one child per mutant, `jobs` at a time. Each verdict goes to the mutant's .meta file
    as it comes in (mutmut's exit codes; a child past its CPU-time limit or HANG times that in wall time is
    killed: TIMEOUT). True when the budget ran out first (the rest stay unchecked)."""
    os.chdir(mutants)
    sys.path[:0] = [str(mutants / "src"), str(mutants)]
    import pytest

    stats = json.loads((mutants / "mutmut-stats.json").read_text())
    covering, durations = stats["tests_by_mangled_function_name"], stats["duration_by_test"]
    metas = mutant_meta_files(mutants)
    all_tests = sorted({t for tests in covering.values() for t in tests})
    pytest.main(["--rootdir=.", "--collect-only", "-qq", *all_tests, *PYTEST_ARGS])  # the warm-up
    deadline, running = time.monotonic() + budget_s, {}

    def reap() -> None:
        pid, status, usage = os.wait4(-1, 0)
        name, started, _ = running.pop(pid)
        code = (
            TIMEOUT
            if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
            else os.waitstatus_to_exitcode(status)
        )
        record(metas[name], name, code, time.monotonic() - started)
        print(f"{name}: exit {code}, {usage.ru_utime + usage.ru_stime:.2f} CPU-s", flush=True)

    for name in names:
        tests = sorted(covering.get(name.partition("__mutmut_")[0], []), key=lambda t: durations.get(t, 0.0))
        if not tests:
            record(metas[name], name, NO_TESTS, 0.0)
            continue
        while len(running) >= jobs or (running and time.monotonic() > deadline):
            wait_or_kill(running)
            reap()
        if time.monotonic() > deadline:
            return True
        limit = TIMEOUT_FACTOR * sum(durations.get(t, 0.0) for t in tests) + TIMEOUT_SECONDS
        pid = os.fork()
        if pid == 0:
            run_mutant(name, tests, time.process_time() + limit)
        running[pid] = (name, time.monotonic(), time.monotonic() + HANG * limit)
    while running:
        wait_or_kill(running)
        reap()
    return False


def wait_or_kill(running: dict[int, tuple[str, float, float]]) -> None:
    """Wait until a child has exited, killing any that runs past its wall-time limit."""
    while True:
        for pid, (_, _, until) in running.items():
            if time.monotonic() > until:
                os.kill(pid, signal.SIGKILL)
        if os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return
        time.sleep(0.05)


def collect(work: Path, module: str, only: list[str] | None) -> list[dict]:
    """Every mutant of the module (or of the sample `only`) with its status and diff, from mutmut's .meta files."""
    from mutmut.configuration import reset_config
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    cwd = os.getcwd()
    os.chdir(work)
    reset_config()
    try:
        mutants = []
        for meta in sorted(Path("mutants/src/fedrepro", module).rglob("*.py.meta")):
            data = json.loads(meta.read_text())
            path = str(meta.relative_to("mutants"))[: -len(".meta")]
            for name, code in data["exit_code_by_key"].items():
                if only is not None and name not in only:
                    continue
                status = STATUS.get(code, "suspicious")
                row = {
                    "name": name,
                    "status": status,
                    "path": path,
                    "seconds": round(data["durations_by_key"].get(name, 0.0), 2),
                }
                if status != "killed":
                    try:
                        row["diff"] = get_diff_for_mutant(name, path=path)
                    except Exception as err:  # a diff is a convenience, never a reason to lose the result
                        row["diff"] = f"(no diff: {err})"
                mutants.append(row)
        return mutants
    finally:
        os.chdir(cwd)
        reset_config()


def summarise(module: str, mutants: list[dict], equivalent: dict[str, tuple[str, str]]) -> dict:
    """Counts per column; a listed equivalent mutant counts as equivalent only while its diff still matches."""
    counts = {k: 0 for k in ["killed", "survived", "timeout", "no tests", "not checked", "other", "equivalent"]}
    counts["survived text only"] = 0  # a subset of "survived": only a string's text changed
    for m in mutants:
        m.pop("equivalent", None)
        # killed by a signal (mutmut's "segfault": -9 / -11, e.g. its CPU-time kill): the tests did not pass
        status = "timeout" if m["status"] == "segfault" else m["status"]
        if m["name"] in equivalent and status not in ("killed", "timeout"):
            line, reason = equivalent[m["name"]]
            if line == mutated_line(m.get("diff", "")):
                status, m["equivalent"] = "equivalent", reason
            else:  # mutmut renumbers a function's mutants when the function changes
                print(
                    f"  warning: {m['name']} in {EQUIVALENT.name} is now a different mutant; not counted "
                    f"as equivalent. Check it again.",
                    flush=True,
                )
        counts[status if status in counts else "other"] += 1
        if status == "survived" and text_only(m.get("diff", "")):
            counts["survived text only"] += 1
    # Timeouts count as killed (the tests did not pass); mutants the time budget never reached are
    # left out of the denominator and reported as "not checked".
    checked = sum(counts.values()) - counts["survived text only"] - counts["equivalent"] - counts["not checked"]
    detected = counts["killed"] + counts["timeout"]
    behaviour = checked - counts["survived text only"]
    return {
        "module": module,
        "total": len(mutants),
        "counts": counts,
        "checked_non_equivalent": checked,
        "killed_pct": round(100.0 * detected / checked, 1) if checked else None,
        "killed_pct_without_text_only": round(100.0 * detected / behaviour, 1) if behaviour else None,
    }


def resummarise() -> None:
    """Apply the current equivalent list to every stored result without running anything."""
    equivalent = read_equivalent()
    for path in RESULTS.glob("*.json"):
        result = json.loads(path.read_text())
        result.update(summarise(result["module"], result["mutants"], equivalent))
        path.write_text(json.dumps(result, indent=1) + "\n")


def git_commit(root: Path) -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "src", "tests"], cwd=root, capture_output=True, text=True
    ).stdout.strip()
    return out.stdout.strip() + ("+uncommitted" if dirty else "")


def table() -> str:
    rows = [
        "| module | commit | mutants run | killed | survived (text only) | timeout | no tests | equivalent "
        "| not checked | killed % of non-equivalent | same, text-only survivors left out | wall time |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = {m: i for i, m in enumerate(MODULES)}
    results = [json.loads(p.read_text()) for p in RESULTS.glob("*.json")]
    for r in sorted(results, key=lambda r: order.get(r["module"], 99)):
        c = r["counts"]
        pct = "n/a" if r["killed_pct"] is None else f"{r['killed_pct']:.1f} %"
        pct2 = r.get("killed_pct_without_text_only")
        pct2 = "n/a" if pct2 is None else f"{pct2:.1f} %"
        note = " (stopped at the time budget)" if r.get("stopped") else ""
        run = f"{r['sample']} of {r['population']} (sample)" if r.get("sample") else f"{r['total']}"
        rows.append(
            f"| {r['module']} | {r['commit']} | {run} | {c['killed']} | {c['survived']} ({c.get('survived text only', 0)}) | {c['timeout']} "
            f"| {c['no tests']} | {c['equivalent']} | {c['not checked']} | {pct} | {pct2} "
            f"| {r['wall_s'] / 60:.1f} min{note} |"
        )
    measured = [r["module"] for r in results]
    missing = [m for m in MODULES if m not in measured]
    if missing:
        rows.append("")
        rows.append("Not measured yet: " + ", ".join(missing) + ".")
    return "\n".join(rows)


def equivalent_list() -> str:
    rows = [f"| `{name}` | `{line}` | {reason} |" for name, (line, reason) in sorted(read_equivalent().items())]
    if not rows:
        return "None listed yet."
    return "\n".join(["| mutant | mutated line | why it is equivalent |", "|---|---|---|", *rows])


def replace_between(text: str, start: str, end: str, body: str) -> str:
    if start not in text or end not in text:
        sys.exit(f"{DOC} has no {start} ... {end} markers")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def write_table() -> None:
    text = replace_between(DOC.read_text(), START, END, table())
    text = replace_between(text, "<!-- equivalent:start -->", "<!-- equivalent:end -->", equivalent_list())
    DOC.write_text(text)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--module",
        action="append",
        choices=list(MODULES),
        help="module under src/fedrepro (repeatable); default: all, smallest first",
    )
    ap.add_argument("--root", type=Path, default=REPO, help="tree to mutate (default: this repository)")
    ap.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()) / "fedrepro-mutate",
        help="scratch folder for the copies (default: %(default)s)",
    )
    ap.add_argument("--jobs", type=int, default=2, help="parallel mutant workers (default: %(default)s)")
    ap.add_argument(
        "--budget-min",
        type=float,
        default=20.0,
        help="stop a module after this many minutes; unreached mutants are 'not checked'",
    )
    ap.add_argument(
        "--sample",
        type=int,
        default=0,
        help="run a seeded uniform sample of this many mutants per module (default: all)",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the sample (default: %(default)s)")
    ap.add_argument(
        "--table-only",
        action="store_true",
        help="run nothing: apply equivalent.tsv to the stored results and rebuild the table",
    )
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)  # run_mutmut's warm runner: a mutants/ folder
    ap.add_argument("--budget-s", type=float, default=math.inf, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.serve:
        names = json.loads((args.serve / WARM_NAMES).read_text())
        sys.exit(STOPPED if warm_run(args.serve.resolve(), names, args.jobs, args.budget_s) else 0)
    if not args.table_only:
        equivalent = read_equivalent()
        RESULTS.mkdir(parents=True, exist_ok=True)
        root = args.root.resolve()
        for module in args.module or list(MODULES):
            work = args.work / slug(module)
            prepare(root, work, module)
            log = args.work / f"{slug(module)}.log"
            print(
                f"mutating src/fedrepro/{module} against {' '.join(module_tests(root, module))} (log: {log})",
                flush=True,
            )
            wall, stopped, chosen = run_mutmut(
                work, module, args.jobs, args.budget_min * 60, args.sample, args.seed, log
            )
            population = len(all_mutant_names(work, module))
            mutants = collect(work, module, None if chosen is None else set(chosen))
            if not mutants:
                sys.exit(f"no mutants found for {module}; see {log}")
            result = summarise(module, mutants, equivalent)
            result.update(
                commit=git_commit(root),
                date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                tests=module_tests(root, module),
                wall_s=round(wall, 1),
                stopped=stopped,
                tool="mutmut 3.8.1",
                population=population,
                sample=None if chosen is None else len(chosen),
                seed=args.seed,
                mutants=mutants,
            )
            (RESULTS / f"{slug(module)}.json").write_text(json.dumps(result, indent=1) + "\n")
            c = result["counts"]
            print(
                f"  {module}: {c['killed'] + c['timeout']} of {result['checked_non_equivalent']} killed "
                f"({result['killed_pct']} %), {c['not checked']} not checked, {wall / 60:.1f} min",
                flush=True,
            )
    else:
        resummarise()
    write_table()


if __name__ == "__main__":
    main()
