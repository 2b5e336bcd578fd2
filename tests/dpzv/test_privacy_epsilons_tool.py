"""tools/privacy_epsilons.py's DPZV reader: the sound row is DPZV's, and both common adversaries are printed."""

import importlib.util
import math
from pathlib import Path

import pandas as pd

from fedrepro.report.dpzv import SOUND_LABEL

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("privacy_epsilons", ROOT / "tools" / "privacy_epsilons.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dpzv_rows_print_both_adversaries_and_the_sound_row_as_dpzvs():
    table = pd.DataFrame(
        {
            "dataset": ["digits"] * 3,
            "label": ["DPZV", SOUND_LABEL, "VAFL"],
            "clip": [10.0, 10.0, math.nan],
            "eps": [1.0, 1.0, 1.0],
            "eps_pld": [1.03, 1.0, 1.03],
            "eps_known_pooled": [6.54, 1.0, 6.54],
            "eps_known_one_client": [2.89, 0.6, 2.89],
            "eps_sent_one_client": [math.nan, math.nan, 598.0],
            "eps_pld_sound": [math.inf, 1.0, math.nan],
            "eps_vs_server": [math.inf, math.inf, 598.0],
            "eps_vs_clients": [math.inf, 1.0, math.inf],
            "adversary": ["clients", "clients", "server"],
        }
    )
    out = _tool().dpzv(table)
    assert list(out["label"]) == ["C = 10.0", "C = 10.0", ""]
    texts = list(out["bound_for_what_is_sent"])
    assert texts[1] == "vs clients (a label) 1; vs server (a feature slice) inf"
    assert texts[2] == "vs clients (a label) inf; vs server (a feature slice) 598"
    old = _tool().dpzv(table.drop(columns=["eps_vs_server", "eps_vs_clients"]))  # a table from before them
    assert old["bound_for_what_is_sent"].iloc[2].startswith("598 (client trains on its raw features")
