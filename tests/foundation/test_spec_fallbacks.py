"""A method's fallback for a config key equals what config.yaml sets (or there is none).

Every `<x>.get("<key>", <literal>)` in `src/fedrepro/algorithms` is found in the AST. Its key is
followed back to a path (`probe = spec.get("probe", {})` then `probe.get("epochs", 50)` reads
`probe.epochs`) and looked up in its paper's section of config.yaml (configs/paper.yaml where the
path lives only there; the top level for keys like `device`): the literal must equal the value at
the shallowest place that sets it. A key set to different values there (one per method or run),
or read for a run the config does not describe, is listed in ALLOWED with the reason.
"""

import ast
from pathlib import Path

import pytest
import yaml

from fedrepro.algorithms import PAPERS

ROOT = Path(__file__).resolve().parents[2]
ALGORITHMS = ROOT / "src" / "fedrepro" / "algorithms"
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
PAPER_SCALE = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())
# the receivers that hold a whole method spec: a key read from them is a path from the section's top
SPEC_ROOTS = {"spec", "job.spec", "self.spec", "x", "settings.extra", "self.cfg.extra"}

# (module, key) -> why its fallback is legitimately not one config value
ALLOWED = {
    ("dpzv/memory.py", "eps"): "Figure 6 measures at eps = inf unless its job says; config's eps are other runs'",
    ("dpzv/memory.py", "zo_momentum"): "NaN marks a Figure 6 entry without its own zo_momentum (a table column)",
    ("fedal/fedal.py", "use_lf"): "read for method fedal only, whose block sets it; feddf_al's false is FedDF's",
    ("fedal/feddf.py", "use_lf"): "FedDF has no LF term: feddf's block has no use_lf, feddf_al's sets false",
    ("fedsc/base.py", "participation"): "per run: the planner writes full or partial, config lists both per level",
    ("fedsc/fedsc.py", "eps"): "per run: a spec without a privacy level is the eps = inf run",
    ("fedsc/prefix.py", "after"): "per run: each privacy level of config has its own sharing schedule",
    ("fedsc/prefix.py", "every"): "per run: each privacy level of config has its own sharing schedule",
}


def _key(node) -> str | None:
    """The key k of `<x>.get("k", ...)` or `<x>["k"]`, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        arg = node.args[0]
    elif isinstance(node, ast.Subscript):
        arg = node.slice
    else:
        return None
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def _receiver(node):
    return node.func.value if isinstance(node, ast.Call) else node.value


def _path(node, names: dict) -> tuple:
    """The config path `node` holds: () for a whole spec; a name bound from a read extends its reader's path."""
    if isinstance(node, ast.BoolOp):  # spec.get("privacy") or {}
        node = node.values[0]
    key = _key(node)
    if key is not None:
        return (*_path(_receiver(node), names), key)
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    text = ast.unparse(node)
    return () if text in SPEC_ROOTS else (text.split(".")[-1],)  # `sharing`, `entry`: the block's own name


def fallback_reads() -> list[tuple[str, int, tuple, object]]:
    """(module, line, path, literal fallback) of every `.get("key", <literal>)` under algorithms/."""
    reads = []
    for module in sorted(ALGORITHMS.rglob("*.py")):
        for function in ast.walk(ast.parse(module.read_text())):
            if not isinstance(function, ast.FunctionDef):
                continue
            names, nodes = {}, list(ast.walk(function))
            for node in nodes:
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    if path := _path(node.value, names):
                        names[node.targets[0].id] = path
            for node in nodes:
                if isinstance(node, ast.Call) and _key(node) is not None and len(node.args) == 2:
                    try:
                        default = ast.literal_eval(node.args[1])
                    except ValueError:
                        continue  # computed (e.g. "on a GPU"): not a written constant
                    path = _path(_receiver(node), names) + (_key(node),)
                    reads.append((str(module.relative_to(ALGORITHMS)), node.lineno, path, default))
    return reads


def _settings(node, path=()):
    """(path, value) of every setting below `node`; a list's items are one level deeper."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*path, key), value
            yield from _settings(value, (*path, key))
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, dict):
                yield from _settings(item, (*path, "[]"))


def config_values(paper: str, path: tuple) -> list:
    """The values the config sets at the shallowest place ending in `path` (or in its last key alone)."""
    for section in (CONFIG.get(paper, {}), PAPER_SCALE.get(paper, {})):
        for suffix in (path, path[-1:]):
            found = [(len(p), v) for p, v in _settings(section) if p[-len(suffix) :] == suffix]
            if found:
                depth = min(d for d, _ in found)
                return [v for d, v in found if d == depth]
    top = CONFIG.get(path[-1])
    return [top] if len(path) == 1 and top is not None and not isinstance(top, dict) else []


PAPER_OF = {package.rsplit(".", 1)[-1]: paper for paper, package in PAPERS.items()}
READS = [r for r in fallback_reads() if "/" in r[0]]


def test_every_paper_package_maps_to_its_config_section():
    assert {module.split("/")[0] for module, *_ in READS} <= set(PAPER_OF)
    assert set(PAPER_OF.values()) <= set(CONFIG["papers"])


@pytest.mark.parametrize("module, line, path, default", READS, ids=[f"{m}:{n}:{p[-1]}" for m, n, p, _ in READS])
def test_a_fallback_equals_the_config_value(module, line, path, default):
    values = config_values(PAPER_OF[module.split("/")[0]], path)
    if not values or (default == {} and all(isinstance(v, dict) for v in values)):
        return  # a key config does not set, or an empty block whose own keys are checked one by one
    if (module, path[-1]) in ALLOWED:
        return
    assert all(v == default for v in values), (
        f"{module}:{line} falls back to {default!r} for {'.'.join(path)}, config sets {values}: use the config's "
        f"value, read it without a fallback, or list it in ALLOWED with the reason"
    )


def test_every_allowed_read_exists_and_needs_its_entry():
    for module, key in ALLOWED:
        matches = [(p, d) for m, _, p, d in READS if m == module and p[-1] == key]
        assert matches, f"ALLOWED names {module} {key!r}, which no longer reads it with a fallback"
        paper = PAPER_OF[module.split("/")[0]]
        assert any(config_values(paper, p) and config_values(paper, p) != [d] for p, d in matches), (
            f"{module} {key!r} now equals the config: drop it from ALLOWED"
        )
