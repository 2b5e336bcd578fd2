"""FedAL's runs as the report reads them: method names, panel labels, each run's row and setting fields,
and the health of a comparison's side. The tables and figures (report.fedal) and the claims
(report.fedal_claims) both read them here."""

from __future__ import annotations

import pandas as pd

from fedrepro.algorithms import method_table
from fedrepro.eval.health import Health, cell_status
from fedrepro.experiments.fedal import PAPER, panel_setting, parse_setting

NAMES = {name: row.label for name, row in method_table(PAPER).items()}
AXIS_LABEL = {
    "alpha": lambda s: f"alpha={s['alpha']:g}",
    "clients": lambda s: f"N={s['clients']}",
    "public": lambda s: f"|P|={s['public']}",
}


def row_label(method: str, local_steps) -> str:
    """A method's row: its name, and its local steps per round when the run is a local-budget variant."""
    steps = "" if local_steps is None or local_steps != local_steps else f" ({int(local_steps)} local steps)"
    return NAMES[method] + steps


def with_setting(frame: pd.DataFrame) -> pd.DataFrame:
    """The setting's fields as columns, its `panel_setting` (the variant's suffix dropped) and each
    run's `row` label."""
    parsed = pd.DataFrame([parse_setting(s) for s in frame["setting"]], index=frame.index)
    frame = pd.concat([frame.drop(columns=[c for c in parsed if c in frame]), parsed], axis=1)
    frame["panel_setting"] = frame["setting"].map(panel_setting)
    frame["row"] = [row_label(m, n) for m, n in zip(frame["method"], frame["local_steps"])]
    return frame


def health_of(part: pd.DataFrame) -> Health:
    """One side of a comparison: the worst health of its runs' seeds."""
    if "status" not in part:
        return Health()
    reasons = part.get("status_reason", pd.Series("", index=part.index)).fillna("")
    return cell_status([Health(s, r) for s, r in zip(part["status"].fillna("ok"), reasons)])
