"""A method-table label edit re-runs the reports that print it and no training (issue 31; the labels'
own fingerprint, fedrepro.codedeps.LABELS). Beside test_reruns.py, on the same tiny FedAvg slice."""

import pytest

from .test_reruns import REPORTS, dry_run, edited

pytestmark = pytest.mark.pipeline


def test_a_method_label_edit_reruns_the_reports_only(local_slice):
    work, config = local_slice
    table = work / "src/fedrepro/algorithms/fedavg/__init__.py"
    assert 'label="FedAvg"' in table.read_text()
    with edited(table, lambda text: text.replace('label="FedAvg"', 'label="FedAvg, renamed"')):
        jobs, output = dry_run(work, config)
    assert jobs == sorted(REPORTS)  # before the labels' own fingerprint: both training runs too
    assert "were written: fedrepro.algorithms.fedavg.__labels__\n" in output
