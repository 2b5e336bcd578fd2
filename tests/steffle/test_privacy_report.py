"""The SteFFLe privacy table and panel titles: both epsilons, each with its privacy unit and adversary."""

import json

import pandas as pd
import pytest

from fedrepro.privacy import steffle as accounting
from fedrepro.report import steffle as report


def test_privacy_table_and_titles_print_both_epsilons_with_unit_and_adversary(tmp_path):
    """Item 2 and 8 in the report: the paper's accounting and the bound for what is sent side by side,
    each row naming its privacy unit and adversary; a panel title shows the larger bound."""
    delta = 1 / 22500**2
    rec = accounting.steffle_noise(1, delta, 150, [7500] * 3, 0.3987, 2.0, 2.0, 256)
    summary = {
        "spec": {"method": "steffle", "train": {}},
        "rounds": 150,
        "seconds": 1.0,
        "privacy": {"silo_sizes": [7500] * 3, "rho": 0.3987, "rho_w": 0.3987, "delta": delta, "per_eps": {"1": rec}},
    }
    path = tmp_path / "runs" / "credit" / "steffle" / "dp_N3_h0" / "s0_1" / "summary.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(summary))
    row = report.privacy_table([str(path)]).iloc[0]
    assert row["paper_accounting_pld"] == pytest.approx(rec["realised_epsilon"])
    assert row["bound_for_what_is_sent"] == pytest.approx(rec["known_membership_epsilon"])
    assert row["bound_for_what_is_sent"] > 5 * row["paper_accounting_pld"]
    assert "ISRL-DP" in row["privacy_unit"] and "server" in row["adversary"] and "same batch" in row["why"]
    assert "batch revealed" in row["private"]
    rows = pd.DataFrame(
        {
            "method": ["steffle", "ling2024"],
            "eps_value": [1.0, 1.0],
            "realised_eps": [0.98, 0.95],
            "sound_eps": [7.5, 0.95],
        }
    )
    title = report.epsilon_title(1, rows)
    assert "paper's accounting: Ling 0.95, SteFFLe 0.98" in title and "batch revealed: SteFFLe 7.5" in title
    assert "Ling" not in title.split("batch revealed")[1]
    assert "record" in report.units_note(["steffle", "ling2024"]) and "attribute" in report.units_note(["steffle"])
