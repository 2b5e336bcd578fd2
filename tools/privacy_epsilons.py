"""Every private mechanism's printed epsilon, before and after issue 27, from a finished run's privacy tables.

    python tools/privacy_epsilons.py results > epsilons.md

Per mechanism, data set and label: the paper's accounting (what the tables printed before issue 27: the
Poisson-amplified epsilon, batch secret) and the bound for what the code sends against the adversary the
paper's accounting implicitly assumes (known batch; inf where no finite bound holds), with that adversary.
It reads the tables the run wrote (`dpzv/tables/privacy.csv`, `fedsc/tables/privacy_realised.csv`,
`steffle/tables/privacy.csv`); a paper that did not run is skipped. (The stored run record cannot stand in:
`tools/run_record.py` keys a table's numbers by its text columns, and DPZV's privacy table has several rows
per text key.)
"""

from __future__ import annotations

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
]


def dpzv(table: pd.DataFrame) -> pd.DataFrame:
    dpzv_rows = table["label"] == "DPZV"
    # DPZV: the pooled clients' known-batch bound, and the label channel (inf for the raw-label head);
    # the baselines: the server's known-batch bound for one client's slice (fixed client model)
    bound = table["eps_known_pooled"].where(dpzv_rows, table["eps_known_one_client"])
    sound = table.get("eps_pld_sound", pd.Series(float("nan"), index=table.index))
    return pd.DataFrame(
        {
            "paper": "DPZV",
            "mechanism": table["label"],
            "dataset": table["dataset"],
            "label": ["C = " + str(c) if d else "" for c, d in zip(table["clip"], dpzv_rows)],
            "eps_label": table["eps"],
            "paper_accounting": table["eps_pld"],
            "bound_for_what_is_sent": [
                f"{b:.3g} known batch" + (f"; label channel {s:.3g}" if d else "; fixed client model")
                for b, s, d in zip(bound, sound, dpzv_rows)
            ],
            "adversary": table["adversary"],
        }
    )


def fedsc(table: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "paper": "FedSC",
            "mechanism": "FedSC DP-CalR",
            "dataset": table["dataset"],
            "label": table["run"],
            "eps_label": table["label ε"],
            "paper_accounting": table["eps_paper_max"],
            "bound_for_what_is_sent": table["eps_pld_max"].map(lambda e: f"{e:.3g} (tight PLD of the realised shares)"),
            "adversary": "the server (the matrices; the weights cross in clear)",
        }
    )


def steffle(table: pd.DataFrame) -> pd.DataFrame:
    table = table[table["eps"].astype(float) < float("inf")]
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
        }
    )


READERS = {
    "dpzv/tables/privacy.csv": dpzv,
    "fedsc/tables/privacy_realised.csv": fedsc,
    "steffle/tables/privacy.csv": steffle,
}


def epsilons(results: str | Path) -> pd.DataFrame:
    frames = [
        read(pd.read_csv(Path(results) / path)) for path, read in READERS.items() if (Path(results) / path).exists()
    ]
    return pd.concat(frames, ignore_index=True)[COLUMNS] if frames else pd.DataFrame(columns=COLUMNS)


if __name__ == "__main__":
    table = epsilons(sys.argv[1] if len(sys.argv) > 1 else "results")
    print(table.to_markdown(index=False, floatfmt=".3g"))
