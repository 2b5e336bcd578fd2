"""Code inputs of pipeline jobs, derived from what their entry points import.

A rule's `params.entry` ("module:function") is the root. `closure(entry)` follows every
`import` and `from ... import` inside `fedrepro` transitively (static analysis of the
source, imports inside functions included), the `__init__` of every package on the way
(Python runs them on import), "fedrepro.module:attribute" strings (the lazy registries
of models and methods, resolved by `fedrepro.registry`) and the paper method tables that
`fedrepro.algorithms.method_table(paper)` imports by name (a call with the paper as a string,
or as a module-level constant such as `PAPER = "fedal"`). `fedrepro.pipeline` and
`fedrepro.registry` are roots of every job (workflow/scripts/entry.py runs them).

Code is compared by content, not by file time: `code_inputs` writes one small file per entry
point (`write_fingerprint`: the code a job of that entry runs), listing the hash of every module of its
closure, each the hash of the module's syntax tree without docstrings (`ast.dump` drops comments and
formatting by construction), and rewrites it only when one of them changes. Rules list that one file as
their `code` input, so Snakemake (which compares file times) re-runs a job after a change in behaviour
of a module it runs, and not after a comment, a docstring or a reformatting. Package data that modules
read (the published reference tables) is hashed into the fingerprint of the module that reads it. The
scripts the workflow runs (workflow/scripts/entry.py) are listed too, by their path in the workflow.
A job checks the listed hashes against the code it runs (`fedrepro.pipeline.stale_code`).

A paper's method-table labels (its names in tables and figures) change no number: the fingerprint of
the table's package leaves them out, and a pseudo-module `<package>.__labels__` holds them, in the
closure of an entry only where one of its modules reads a `.label` attribute (the reports). A label
edit re-runs the reports and no training.

`python -m fedrepro.codedeps module:function` prints the closure of an entry point.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from fedrepro.atomic import atomic_write_text

PACKAGE = "fedrepro"
SRC = Path(__file__).resolve().parent
ALWAYS = ("fedrepro.pipeline", "fedrepro.registry")
REGISTRY_STRING = re.compile(r"^(fedrepro(?:\.\w+)+):\w+$")
# Files a module reads at run time (relative to the package folder), hashed into its fingerprint.
DATA_FILES = {"fedrepro.report.tables": "report/published"}
# The functions of fedrepro.algorithms that import a paper's method table (its PAPERS package).
TABLE_READERS = ("method_table", "methods", "method_entry")
FINGERPRINT_SUFFIX = ".code"
# The workflow's scripts (relative to its folder, two above the package folder) that every job runs.
SCRIPTS = ("workflow/scripts/entry.py",)
# Modules that decide which finished work a job reuses, never what it computes (the store of finished work):
# left out of every fingerprint, so an edit there re-runs no job and keeps every stored entry's key.
BOOKKEEPING = ("fedrepro.store",)
LABELS = "__labels__"  # `<paper package>.__labels__`: the labels of its method table (module docstring)
METHOD_LABEL_POSITION = 1  # fedrepro.algorithms.Method(entry, label, ...)


def module_file(name: str, src: Path = SRC) -> Path | None:
    """Source file of module `name` inside the package folder `src`, or None if there is none."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    if parts[-1] == LABELS:
        table = ".".join(parts[:-1])
        return module_file(table, src) if table in paper_packages(src).values() else None
    base = Path(src).joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _parents(name: str) -> list[str]:
    """'fedrepro.a.b' -> ['fedrepro', 'fedrepro.a']: packages whose __init__ runs first."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _absolute(node: ast.ImportFrom, name: str, src: Path) -> str:
    """The module an ImportFrom names, relative imports made absolute."""
    if not node.level:
        return node.module or ""
    is_package = module_file(name, src).name == "__init__.py"
    parts = name.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@functools.cache
def paper_packages(src: Path = SRC) -> dict[str, str]:
    """`fedrepro.algorithms.PAPERS` (paper -> the package holding its method table), read from
    the source tree `src` without importing it."""
    path = module_file(f"{PACKAGE}.algorithms", src)
    if path is None:
        return {}
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and "PAPERS" in _assigned_names(node):
            return ast.literal_eval(node.value)
    return {}


def _assigned_names(node: ast.Assign | ast.AnnAssign) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [target.id for target in targets if isinstance(target, ast.Name)]


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """The module-level `NAME = "text"` assignments of a module."""
    return {
        name: node.value.value
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for name in _assigned_names(node)
    }


def _method_tables(nodes: list[ast.AST], constants: dict[str, str], src: Path) -> set[str]:
    """The paper packages whose method table the code `nodes` reads through TABLE_READERS."""
    packages = paper_packages(src)
    found = set()
    for node in _walk(nodes):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        paper = node.args[0]
        paper = paper.value if isinstance(paper, ast.Constant) else constants.get(getattr(paper, "id", None))
        if called in TABLE_READERS and paper in packages:
            found.add(packages[paper])
    return found


def _walk(nodes: list[ast.AST]):
    for node in nodes:
        yield from ast.walk(node)


ALL = None  # a module imported as a module object: any of its functions may run


@dataclass(frozen=True)
class Uses:
    """What a piece of code may run: fedrepro modules with the top-level names it takes from each (ALL: the
    module object, any name), and the names it reads (its own module's functions among them)."""

    modules: tuple[tuple[str, frozenset[str] | None], ...]
    names: frozenset[str]


def _uses(nodes: list[ast.AST], name: str, src: Path, constants: dict[str, str]) -> Uses:
    """The imports (statements, registry strings "fedrepro.x:y", method tables read by name) and the names
    read by the code `nodes` of module `name`."""
    found: list[tuple[str, frozenset[str] | None]] = [(table, ALL) for table in _method_tables(nodes, constants, src)]
    names = set()
    for node in _walk(nodes):
        if isinstance(node, ast.Import):
            found += [(alias.name, ALL) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found += _imported(node, name, src)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = REGISTRY_STRING.match(node.value)
            if match:
                found.append((match.group(1), frozenset({node.value.rpartition(":")[2]})))
        elif isinstance(node, ast.Name):
            names.add(node.id)
    kept = tuple((module, wanted) for module, wanted in found if module_file(module, src) is not None)
    return Uses(kept, frozenset(names))


def _imported(node: ast.ImportFrom, name: str, src: Path) -> list[tuple[str, frozenset[str] | None]]:
    """`from x import a, b` in module `name`: x with the names a and b, or a submodule x.a as a whole."""
    module = _absolute(node, name, src)
    found: list[tuple[str, frozenset[str] | None]] = []
    for alias in node.names:
        if alias.name == "*":
            found.append((module, ALL))
        elif module_file(f"{module}.{alias.name}", src) is not None:
            found += [(f"{module}.{alias.name}", ALL), (module, frozenset())]
        else:
            found.append((module, frozenset({alias.name})))
    return found


@functools.cache
def module_uses(name: str, src: Path = SRC) -> tuple[Uses, dict[str, Uses]]:
    """(what importing module `name` runs, {top-level function: what calling it may run}). Importing runs every
    top-level statement but the bodies of its functions (their decorators and defaults run); a class counts
    whole. A function's body, with the imports inside it, counts only for a job that reaches the function."""
    path = module_file(name, src)
    tree = ast.parse(path.read_text(), filename=str(path))
    constants = _string_constants(tree)
    functions = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    on_import: list[ast.AST] = []
    for node in tree.body:
        if functions.get(getattr(node, "name", None)) is node:
            on_import += [*node.decorator_list, *node.args.defaults, *filter(None, node.args.kw_defaults)]
        else:
            on_import.append(node)
    by_function = {function: _uses(node.body, name, src, constants) for function, node in functions.items()}
    return _uses(on_import, name, src, constants), by_function


def _reached(wanted: frozenset[str] | None, on_import: Uses, functions: dict[str, Uses]) -> set[str]:
    """The module's functions that may run: the names taken from it (ALL: every one), those its import-time
    code reads, and those the reached functions read, transitively."""
    if wanted is ALL:
        return set(functions)
    todo = [n for n in wanted | on_import.names if n in functions]
    reached: set[str] = set()
    while todo:
        function = todo.pop()
        if function not in reached:
            reached.add(function)
            todo += [n for n in functions[function].names if n in functions]
    return reached


@functools.cache
def closure(entry: str, src: Path = SRC) -> tuple[str, ...]:
    """Every fedrepro module a job with entry point `entry` ("module:function") may run: what importing the
    entry module and the ALWAYS modules runs, what the entry function may call, and so on through every module
    reached (the __init__ of each package on the way included). An import inside a function counts only where
    a job reaches that function."""
    module, _, function = entry.partition(":")
    missing = [root for root in (module, *ALWAYS) if module_file(root, src) is None]
    if missing:
        raise ValueError(f"entry {entry!r}: no module {missing[0]!r} in {src}")
    wanted: dict[str, frozenset[str] | None] = {}
    todo: list[tuple[str, frozenset[str] | None]] = [(module, frozenset({function})), *((m, ALL) for m in ALWAYS)]
    while todo:
        name, names = todo.pop()
        before = wanted.get(name, frozenset())
        now = ALL if before is ALL or names is ALL else before | names
        if name in wanted and now == before:
            continue
        wanted[name] = now
        on_import, functions = module_uses(name, src)
        todo += [(parent, frozenset()) for parent in _parents(name) if module_file(parent, src) is not None]
        todo += on_import.modules
        for reached in _reached(now, on_import, functions):
            todo += functions[reached].modules
    seen = set(wanted)
    if any(_reads_labels(name, src) for name in seen):
        seen.update(f"{table}.{LABELS}" for table in paper_packages(src).values() if table in seen)
    return tuple(sorted(seen))


@functools.cache
def _reads_labels(name: str, src: Path = SRC) -> bool:
    """Whether module `name` reads a `.label` attribute (a method table's label, or possibly another)."""
    path = module_file(name, src)
    tree = ast.parse(path.read_text(), filename=str(path))
    return any(isinstance(node, ast.Attribute) and node.attr == "label" for node in ast.walk(tree))


def _label_nodes(tree: ast.Module) -> list[ast.Constant]:
    """The label strings of a method table: the `label` argument of every call of `Method` or of a
    module-level function with a `label` parameter (a table's row helper), where it is a string."""
    positions = {"Method": METHOD_LABEL_POSITION}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names = [arg.arg for arg in node.args.posonlyargs + node.args.args]
            if "label" in names:
                positions[node.name] = names.index("label")
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in positions:
            at = positions[node.func.id]
            given = [k.value for k in node.keywords if k.arg == "label"] or node.args[at : at + 1]
            found += [v for v in given if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    return found


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(getattr(body[0], "value", None), ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _tree_hash(tree: ast.AST):  # -> a hashlib sha256 object
    return hashlib.sha256(ast.dump(tree, annotate_fields=False, include_attributes=False).encode())


def code_hash(name: str, src: Path = SRC) -> str:
    """Hash of module `name`'s behaviour: its syntax tree without comments, docstrings or
    layout, plus the content of the data files it reads (DATA_FILES)."""
    path = module_file(name, src)
    tree = _strip_docstrings(ast.parse(path.read_text(), filename=str(path)))
    if name.endswith(f".{LABELS}"):
        return hashlib.sha256("\0".join(node.value for node in _label_nodes(tree)).encode()).hexdigest()
    if name in paper_packages(src).values():
        for node in _label_nodes(tree):
            node.value = ""  # in the fingerprint of `<name>.__labels__` instead
    digest = _tree_hash(tree)
    for data in _data_files(name, src):
        digest.update(str(data.relative_to(src)).encode() + b"\0" + data.read_bytes())
    return digest.hexdigest()


def script_hash(path: str | Path) -> str:
    """Hash of a workflow script's behaviour (SCRIPTS), as `code_hash` takes a module's."""
    return _tree_hash(_strip_docstrings(ast.parse(Path(path).read_text(), filename=str(path)))).hexdigest()


def _data_files(name: str, src: Path) -> list[Path]:
    if name not in DATA_FILES:
        return []
    return [data for data in sorted((Path(src) / DATA_FILES[name]).rglob("*")) if data.is_file()]


def _planned_hash(name: str, src: Path) -> str:
    """`code_hash`, computed once per process for each state (time, size) of the files it reads:
    one parse of the workflow hashes each module once, however many entry points run it."""
    files = [module_file(name, src), *_data_files(name, src)]
    state = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    return _hash_in_state(name, src, state)


@functools.cache
def _hash_in_state(name: str, src: Path, state: tuple) -> str:
    return code_hash(name, src)


def scripts(src: Path = SRC) -> dict[str, Path]:
    """SCRIPTS that exist beside the package folder `src` (a workflow's checkout), by their name."""
    root = Path(src).parents[1]
    return {name: root / name for name in SCRIPTS if (root / name).is_file()}


def fingerprint_text(entries: tuple[str, ...], src: Path = SRC) -> str:
    """One line `<module> <hash>` per module the entries may run (`closure`) but BOOKKEEPING, then one
    `<script> <hash>` per workflow script (SCRIPTS, by its path in the workflow)."""
    names = sorted({name for entry in entries for name in closure(entry, src)} - set(BOOKKEEPING))
    lines = [f"{name} {_planned_hash(name, src)}" for name in names]
    lines += [f"{name} {script_hash(path)}" for name, path in scripts(src).items()]
    return "\n".join(lines) + "\n"


def read_fingerprint(path: str | Path) -> dict[str, str]:
    """A fingerprint file's {module or script: hash}."""
    return parse_fingerprint(Path(path).read_text())


def parse_fingerprint(text: str) -> dict[str, str]:
    """A fingerprint file's text as {module or script: hash}."""
    return dict(line.partition(" ")[::2] for line in text.splitlines() if line)


def fingerprint_path(folder: str | Path, entries: tuple[str, ...]) -> Path:
    """`<folder>/<entry>.code`; entries joined by '+' (':' is no character for a file name everywhere)."""
    return Path(folder) / ("+".join(entry.replace(":", "-") for entry in entries) + FINGERPRINT_SUFFIX)


CHANGED: set[str] = set()  # modules and scripts already named as changed by this process


@functools.cache
def write_fingerprint(folder: str | Path, entries: tuple[str, ...], src: Path = SRC) -> Path:
    """Write the entries' fingerprint file unless it already holds the current hashes (a file
    rewritten with equal content would still look new to Snakemake), naming on stderr what changed.
    Once per process: Snakemake reads the code once, when it parses the workflow."""
    path = fingerprint_path(folder, entries)
    text = fingerprint_text(entries, src)
    try:
        old = path.read_text()
    except (FileNotFoundError, UnicodeDecodeError):
        old = None
    if old == text:
        return path
    if old is not None:
        before, now = parse_fingerprint(old), parse_fingerprint(text)
        changed = sorted(name for name in now.keys() & before.keys() if now[name] != before[name])
        if set(changed) - CHANGED:
            print(
                f"fedrepro: code changed since the fingerprints in {folder} were written: {', '.join(changed)}",
                file=sys.stderr,
            )
        CHANGED.update(changed)
    atomic_write_text(path, text)
    return path


def code_inputs(entry: str | list[str], folder: str | Path, src: str | Path = SRC) -> str:
    """The fingerprint file (in `folder`) of the code `entry` (one "module:function" or a list: a
    job that runs its entry and a function named in its spec) may run, written or refreshed now;
    `src` is the package folder of the workflow's own source tree."""
    entries = tuple(sorted({entry} if isinstance(entry, str) else set(entry)))
    return str(write_fingerprint(str(folder), entries, Path(src)))


def main(argv: list[str]) -> None:
    for entry in argv or ["fedrepro.pipeline:run_snakemake_job"]:
        print(f"{entry}:")
        for name in closure(entry):
            print(f"  {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
