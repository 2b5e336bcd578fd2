"""tests/conftest.once_per_session: a costly Snakemake run shared by the xdist workers of one session
(the paper-scale dry run, the local FedAvg slice) is computed once, and a worker that asks while another
computes it waits for that result instead of computing its own."""

import threading
import time

from tests.conftest import once_per_session


def test_the_first_caller_computes_and_every_other_reads_its_result(tmp_path_factory):
    calls = []

    def make():
        calls.append(threading.get_ident())
        time.sleep(0.3)  # the second thread asks while the first one is still computing
        return {"stdout": "planned", "call": len(calls)}

    results = []
    threads = [
        threading.Thread(target=lambda: results.append(once_per_session(tmp_path_factory, "shared_twice", make)))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert results == [{"stdout": "planned", "call": 1}] * 2
    assert once_per_session(tmp_path_factory, "shared_twice", make) == {"stdout": "planned", "call": 1}
    assert len(calls) == 1


def test_a_failed_computation_is_not_kept(tmp_path_factory):
    def fail():
        raise RuntimeError("snakemake failed")

    try:
        once_per_session(tmp_path_factory, "failing_once", fail)
    except RuntimeError:
        pass
    assert once_per_session(tmp_path_factory, "failing_once", lambda: {"rc": 0}) == {"rc": 0}
