"""Claims tables count distinct comparisons (fedrepro.report.claims)."""

from fedrepro.eval.verdict import differences
from fedrepro.report.claims import counts, counts_text, distinct


def test_restated_comparisons_collapse_into_their_first_row():
    rows = [
        {"claim": "Table IV: FedAL > FedMD (alpha 1)", "comparison": ("fedal", "fedmd", 1)},
        {"claim": "Table V: FedAL > FedMD (alpha 1)", "comparison": ("fedal", "fedmd", 1)},
        {"claim": "Table IV: FedAL > FedMD (alpha 2)", "comparison": ("fedal", "fedmd", 2)},
        {"claim": "analytic", "comparison": None},
        {"claim": "analytic too", "comparison": None},
        {"claim": "Table IX: FedAL > FedMD (alpha 1)", "comparison": ("fedal", "fedmd", 1)},
    ]
    out = distinct(rows)
    assert [r["claim"] for r in out] == [
        "Table IV: FedAL > FedMD (alpha 1)",
        "Table IV: FedAL > FedMD (alpha 2)",
        "analytic",
        "analytic too",
    ]
    assert out[0]["also"] == "Table V: FedAL > FedMD (alpha 1); Table IX: FedAL > FedMD (alpha 1)"
    assert out[1]["also"] == "" and "also" not in rows[0]


def test_counts_by_outcome():
    verdicts = [differences([1, 1.1]), differences([-1, -1.1]), differences([1, -1, 0.5])]
    verdicts += [differences([0.01, -0.01, 0.02], smallest_effect=0.5), differences([0.2])]
    tally = counts([*verdicts, "not tested (diverged)"])
    assert tally == {"holds": 1, "does not hold": 1, "no effect at this scale": 1, "inconclusive": 2, "not tested": 1}
    assert counts_text(verdicts).startswith("5 distinct comparisons: 1 holds, 1 does not hold")
