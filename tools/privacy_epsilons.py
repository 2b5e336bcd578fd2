"""Every private mechanism's printed epsilon, before and after issue 27, from a finished run.

    python tools/privacy_epsilons.py results > epsilons.md                          # a results folder
    python tools/privacy_epsilons.py tools/records/default_run.json.gz > epsilons.md  # the stored default run

Per mechanism, data set and label: the paper's accounting (what the tables printed before issue 27: the
Poisson-amplified epsilon, batch secret) and the bound for what the code sends against the adversary the
paper's accounting implicitly assumes (known batch; inf where no finite bound holds), with that adversary.
A results folder is read from its privacy tables (`dpzv/tables/privacy.csv`, `fedsc/tables/privacy_realised.csv`,
`steffle/tables/privacy.csv`; a paper that did not run is skipped). A run record (`tools/run_record.py`) keys a
table's numbers by its text columns, which DPZV's privacy table repeats (one row kept per key), so DPZV is read
from the record's run summaries and the other two tables are rebuilt row by row from their text keys.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

COLUMNS = [
    "paper",
    "mechanism",
    "dataset",
    "label",
    "eps_label",
    "paper_accounting",
    "bound_for_what_is_sent",
    "adversary",
    "unit",
]


# what the baselines' known-batch bound (one client's slice vs the server) leaves out (privacy.dpzv.THREAT_MODELS)
BASELINE_CAVEAT = {
    "VAFL": " for a fixed client model; the client trains on its raw features: larger (audit)",
    "VFL-CZOFO": " for a fixed client model; the client trains on its raw features: larger (audit)",
    "ZOO-VFL": " for h; shared noise sends h' - h in clear: inf",
}
# why the privacy table's eps_sent_one_client differs from that bound (privacy.dpzv.CLIENT_MODEL_LEAK, short)
SENT_WHY = {
    "VAFL": "client trains on its raw features: sqrt(B K')/z",
    "VFL-CZOFO": "client trains on its raw features: sqrt(B K')/z",
    "ZOO-VFL": "shared noise sends h' - h in clear",
}


def _baseline_bound(label: str, known: float, sent: float) -> str:
    """eps_sent_one_client with the fixed-model known-batch bound beside it; a run from before that column:
    the known-batch bound with what it leaves out."""
    if pd.isna(sent):
        return f"{known:.3g} known batch" + BASELINE_CAVEAT.get(label, "")
    return f"{sent:.3g} ({SENT_WHY.get(label, 'what the code sends')}; fixed client model {known:.3g})"


def dpzv(table: pd.DataFrame) -> pd.DataFrame:
    from fedrepro.report.dpzv import SOUND_LABEL

    dpzv_rows = table["label"].isin(["DPZV", SOUND_LABEL])
    # DPZV: the pooled clients' known-batch bound, and the label channel (inf for the raw-label head);
    # the baselines: the server's bound for one client's slice for what the code sends (eps_sent_one_client)
    bound = table["eps_known_pooled"].where(dpzv_rows, table["eps_known_one_client"])
    nan = pd.Series(float("nan"), index=table.index)
    sound, sent = table.get("eps_pld_sound", nan), table.get("eps_sent_one_client", nan)
    # issue 39: each run against both common adversaries (a table from before the columns: the text above)
    server, clients = table.get("eps_vs_server", nan), table.get("eps_vs_clients", nan)
    texts = [
        f"{b:.3g} known batch; label channel {s:.3g}" if d else _baseline_bound(label, b, e)
        for b, s, e, d, label in zip(bound, sound, sent, dpzv_rows, table["label"])
    ]
    return pd.DataFrame(
        {
            "paper": "DPZV",
            "mechanism": table["label"],
            "dataset": table["dataset"],
            "label": ["C = " + str(c) if d else "" for c, d in zip(table["clip"], dpzv_rows)],
            "eps_label": table["eps"],
            "paper_accounting": table["eps_pld"],
            "bound_for_what_is_sent": [
                t if pd.isna(v) else f"vs clients (a label) {c:.3g}; vs server (a feature slice) {v:.3g}"
                for t, v, c in zip(texts, server, clients)
            ],
            "adversary": table["adversary"],
            "unit": table.get("protects", nan),  # what the noise protects and the privacy unit
        }
    )


def fedsc(table: pd.DataFrame) -> pd.DataFrame:
    """FedSC sends the model weights in the clear every round: against the server no finite epsilon holds;
    the realised tight epsilon holds only against a party that sees the matrices alone."""
    from fedrepro.privacy.fedsc import MATRICES_ONLY, SERVER_EPSILON, SERVER_REASON

    return pd.DataFrame(
        {
            "paper": "FedSC",
            "mechanism": "FedSC DP-CalR",
            "dataset": table["dataset"],
            "label": table["run"],
            "eps_label": table["label ε"],
            "paper_accounting": table["eps_paper_max"],
            "bound_for_what_is_sent": table["eps_pld_max"].map(
                lambda e: (
                    f"{SERVER_EPSILON} ({SERVER_REASON}); matrices alone: {e:.3g} (tight PLD of the realised shares)"
                )
            ),
            "adversary": f"the server: ∞; the matrices-alone bound: {MATRICES_ONLY}",
        }
    )


def steffle(table: pd.DataFrame) -> pd.DataFrame:
    """SteFFLe's privacy table: every private run (eps label finite), with its privacy unit (which says
    what the accounting takes as public: P_S and the cell frequencies)."""
    table = table[table["eps"].astype(float) != float("inf")]  # NaN kept: a row whose numbers the record lost
    return pd.DataFrame(
        {
            "paper": "SteFFLe",
            "mechanism": table["method"],
            "dataset": table["dataset"],
            "label": table["setting"],
            "eps_label": table["eps"],
            "paper_accounting": table["paper_accounting_pld"],
            "bound_for_what_is_sent": table["bound_for_what_is_sent"].map(lambda e: f"{float(e):.3g}"),
            "adversary": table["adversary"],
            "unit": table["privacy_unit"] if "privacy_unit" in table else float("nan"),
        }
    )


READERS = {
    "dpzv/tables/privacy.csv": dpzv,
    "fedsc/tables/privacy_realised.csv": fedsc,
    "steffle/tables/privacy.csv": steffle,
}


def _joined(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The papers' rows in COLUMNS (a column a reader does not give is left blank)."""
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True).reindex(columns=COLUMNS) if frames else pd.DataFrame(columns=COLUMNS)


def epsilons(results: str | Path) -> pd.DataFrame:
    """Every private mechanism's epsilons from a results folder's privacy tables (a paper that did not run
    is skipped)."""
    return _joined(
        [read(pd.read_csv(Path(results) / path)) for path, read in READERS.items() if (Path(results) / path).exists()]
    )


DPZV_SUMMARY_KEYS = (
    "eps",
    "eps_pld",
    "eps_known_pooled",
    "eps_known_one_client",
    "eps_sent_one_client",
    "eps_vs_server",
    "eps_vs_clients",
)
DPZV_SUMMARY_COLUMNS = ["dataset", "label", "adversary", "clip", *DPZV_SUMMARY_KEYS, "eps_pld_sound"]


def _dpzv_cell(path: str) -> tuple[str, str, str] | None:
    """(data set, method, privacy cell) of a DPZV per-cell summary in a record, e.g.
    `dpzv/runs/digits/vafl/<cells>/s0_1_2/.checkpoint/eps1/summary.json` -> ("digits", "vafl", "eps1");
    None for any other file (a run's own summary holds no privacy record of one cell)."""
    parts = path.split("/")
    if len(parts) < 6 or parts[:2] != ["dpzv", "runs"] or parts[-1] != "summary.json":
        return None
    return parts[2], parts[3], parts[-2]


def _dpzv_from_summaries(record: dict) -> pd.DataFrame:
    """DPZV's privacy table from the record's per-cell run summaries: one row per (data set, method, eps,
    C) with a private cell, seed 0's record (the accounting does not depend on the seed). The cell's
    folder names its epsilon and clip (`eps1-C10`; a baseline's `eps1` has no C)."""
    from fedrepro.algorithms.dpzv import METHODS
    from fedrepro.privacy.dpzv import THREAT_MODELS, threat_model
    from fedrepro.report.dpzv import SOUND_LABEL

    rows = []
    for path, values in record.items():
        where = _dpzv_cell(path)
        privacy = {k.removeprefix("seeds.0.privacy."): v for k, v in values.items() if k.startswith("seeds.0.privacy.")}
        if where is None or not float(privacy.get("sigma", 0) or 0) > 0:
            continue
        dataset, method, cell = where
        rows.append(
            {
                "dataset": dataset,
                "label": SOUND_LABEL if cell.endswith("-sound") else METHODS[method].label,
                "adversary": (THREAT_MODELS[method] if method != "dpzv" else threat_model("dpzv")).adversary,
                "clip": float(cell.split("-C")[1].split("-")[0]) if "-C" in cell else float("nan"),  # eps1-C10[-sound]
                **{k: privacy.get(k, float("nan")) for k in DPZV_SUMMARY_KEYS},
                "eps_pld_sound": privacy.get("eps_pld_sound", float("inf")) if method == "dpzv" else float("nan"),
            }
        )
    table = pd.DataFrame(rows, columns=DPZV_SUMMARY_COLUMNS)
    return table.sort_values(["dataset", "label", "clip", "eps"], ignore_index=True)


def _rebuilt(values: dict) -> pd.DataFrame:
    """A table of a run record: each row's text cells (keyed by row number) and its numbers (keyed by its
    text cells joined with '/' in an order the record does not keep, so matched by content; the k-th row
    with the same text cells as earlier rows is `<text>#k`, as `tools/run_record.py` writes it)."""
    texts, numbers = {}, {}
    for place, value in values.items():
        key, column = place.rsplit(":", 1)
        (texts.setdefault(int(key), {}) if key.isdigit() else numbers.setdefault(key, {}))[column] = value
    bases = {re.sub(r"#\d+$", "", k) for k in numbers}
    seen: dict[str, int] = {}
    out = []
    for i in sorted(texts):
        cells = texts[i]
        size = sum(len(str(v)) for v in cells.values()) + len(cells) - 1
        match = [k for k in bases if len(k) == size and all(str(v) in k for v in cells.values())]
        row = dict(cells)
        if len(match) == 1:  # the k-th row of this text: `<text>` for the first, `<text>#k` after
            seen[match[0]] = seen.get(match[0], 0) + 1
            key = match[0] if seen[match[0]] == 1 else f"{match[0]}#{seen[match[0]]}"
            row.update(numbers.get(key, {}))
        out.append(row)
    return pd.DataFrame(out)


def epsilons_of_record(path: str | Path) -> pd.DataFrame:
    """Every private mechanism's epsilons from a run record (`tools/run_record.py`, plain or gzipped)."""
    import gzip
    import json

    with gzip.open(path) if str(path).endswith(".gz") else open(path) as f:
        record = json.load(f)
    frames = [dpzv(_dpzv_from_summaries(record))]
    for name, read in READERS.items():
        if name in record and read is not dpzv:
            frames.append(read(_rebuilt(record[name])))
    return _joined(frames)


def main(argv: list[str]) -> str:
    """The Markdown table of a results folder (default `results`) or of a run record (.json, .json.gz)."""
    source = argv[0] if argv else "results"
    table = epsilons_of_record(source) if source.endswith((".json", ".json.gz")) else epsilons(source)
    return table.to_markdown(index=False, floatfmt=".3g")


if __name__ == "__main__":
    print(main(sys.argv[1:]))
