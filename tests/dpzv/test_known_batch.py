"""Issue 27: the batch ids are public (Algorithm 1 line 4), so the bound that holds against a party that sees
them is the unamplified composition over the rounds a sample is used; and the secret-subsample variant."""

import math

import numpy as np
import pytest
import torch

from fedrepro.algorithms.dpzv.dpzv import DPZV
from fedrepro.algorithms.dpzv.vafl import VAFL
from fedrepro.algorithms.dpzv.zoo_vfl import ZOOVFL
from fedrepro.privacy import dpzv as privacy
from tests.dpzv.conftest import tiny_settings

# quick digits: D = 1212 after the 10 % holdout, B = 64, M = 4 clients, 20 epochs, T = 1440
D, B, M, EPOCHS, DELTA = 1212, 64, 4, 20, 1e-3


def _pld_epsilon(z: float, steps: int, delta: float) -> float:
    """Independent accountant: dp_accounting's PLD of `steps` plain Gaussians of multiplier z."""
    import dp_accounting
    from dp_accounting.pld import PLDAccountant

    acc = PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), steps))
    return acc.get_epsilon(delta)


def _digits_multiplier(eps: float) -> float:
    t = privacy.total_rounds(EPOCHS, M, D, B, drop_last=True)
    return privacy.dpzv_noise(eps, DELTA, 10.0, t, D, B)["noise_multiplier"]


@pytest.mark.parametrize("eps,uses,expected", [(1.0, 80, 6.29), (1.0, 20, 2.63), (10.0, 80, 93.5)])
def test_known_batch_epsilon_of_quick_digits(eps, uses, expected):
    """The issue's numbers: 20 passes per client, 80 over the 4 clients; label 1 pooled 6.29, one client 2.63,
    label 10 pooled 93.5 (the paper's Poisson accounting prints 1.02 and 17.1)."""
    assert privacy.known_batch_epsilon(_digits_multiplier(eps), uses, DELTA) == pytest.approx(expected, abs=0.01)


@pytest.mark.parametrize("z,uses", [(5.159, 80), (5.159, 20), (20.0, 7)])
def test_known_batch_epsilon_matches_an_independent_pld(z, uses):
    assert privacy.known_batch_epsilon(z, uses, DELTA) == pytest.approx(_pld_epsilon(z, uses, DELTA), rel=2e-3)


def test_uses_bound_counts_started_passes():
    # 19 rounds of 4 batches a pass: 5 passes (the last one started); 8 rounds: 2 passes
    assert privacy.uses_bound([19, 8, 4], 4) == (5 + 2 + 1, 5)


def test_planned_uses_bound_the_realised_uses(tiny_data):
    """The bound replayed from the schedule before training is >= every sample's realised use count, and
    attained by some sample (the replay is the schedule the run follows)."""
    algo = DPZV(tiny_data, tiny_settings(epochs=3, extra={"server_update": "sgd"}), seed=0)
    counts = np.zeros((tiny_data.num_clients, tiny_data.num_train), dtype=int)
    for _ in range(algo.total_rounds):
        m = algo.next_client()
        counts[m, algo.clients[m].next_batch()] += 1
    pooled, one = algo.uses
    assert counts.sum(0).max() == pooled
    assert counts.max() == one
    assert one < pooled


def test_dpzv_record_prints_paper_and_known_batch(tiny_data):
    algo = DPZV(tiny_data, tiny_settings(eps=1.0, epochs=2, extra={"server_update": "sgd"}), seed=0)
    rec = algo.privacy()
    s = rec["noise_multiplier"]
    pooled, one = algo.uses
    assert rec["eps_known_pooled"] == pytest.approx(privacy.eps_from_mu(math.sqrt(pooled) / s, 1e-3))
    assert rec["eps_known_one_client"] == pytest.approx(privacy.eps_from_mu(math.sqrt(one) / s, 1e-3))
    assert rec["eps_known_pooled"] > rec["eps_known_one_client"]
    assert math.isinf(rec["eps_pld_sound"]) and "Algorithm 1" in rec["threat_model"]
    head = DPZV(
        tiny_data,
        tiny_settings(eps=1.0, epochs=2, extra={"server_update": "sgd", "label_privacy": "dp_head"}),
        seed=0,
    ).privacy()
    # dp_head: Delta and the head on the same known batch, joint multiplier s/sqrt(5)
    assert head["eps_known_pooled"] == pytest.approx(privacy.eps_from_mu(math.sqrt(5 * pooled) / s, 1e-3))


def test_baselines_known_batch_against_the_server(tiny_data):
    vafl = VAFL(tiny_data, tiny_settings(eps=1.0, epochs=2, extra={"embed_clip": 0.5}), seed=0).privacy()
    z = vafl["noise_multiplier"]
    assert vafl["eps_known_pooled"] == pytest.approx(privacy.known_batch_epsilon(z, vafl["uses_pooled"], 1e-3))
    zoo = ZOOVFL(
        tiny_data,
        tiny_settings(
            eps=1.0, epochs=2, extra={"embed_clip": 0.5, "zoo_noise": "independent", "zoo_pair_release": "separate"}
        ),
        seed=0,
    )
    # two releases per round counted separately: twice the steps per use
    assert zoo.privacy()["uses_pooled"] == 2 * zoo.uses[0]


@pytest.mark.parametrize("rate", [1.0, 0.5])
@pytest.mark.parametrize("label_privacy", ["none", "dp_head"])
def test_secret_subsample_calibration_meets_eps_against_the_pooled_clients(rate, label_privacy):
    """The calibrated multiplier reaches the target against the pooled clients by an independent accountant:
    closed-form GDP at rate 1, dp_accounting's PLD (fine grid) of the Poisson-subsampled Gaussian at 0.5."""
    import dp_accounting
    from dp_accounting.pld import PLDAccountant

    uses = (80, 20)
    rec = privacy.secret_subsample_noise(1.0, DELTA, 10.0, B, rate, uses, label_privacy)
    z = rec["noise_multiplier"] / (math.sqrt(5) if label_privacy == "dp_head" else 1.0)
    if rate == 1.0:
        assert privacy.eps_from_mu(math.sqrt(80) / z, DELTA) == pytest.approx(1.0, rel=1e-6)
    else:
        acc = PLDAccountant(value_discretization_interval=2e-4)
        event = dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(z))
        acc.compose(dp_accounting.SelfComposedDpEvent(event, 80))
        assert acc.get_epsilon(DELTA) == pytest.approx(1.0, abs=3e-3)
    assert rec["eps_pld"] <= 1.0 + 2e-3 and rec["eps_known_one_client"] < rec["eps_known_pooled"]
    assert rec["sigma"] == pytest.approx(rec["noise_multiplier"] * 2 * 10.0 / (rate * B))
    assert math.isfinite(rec["eps_pld_sound"]) == (label_privacy == "dp_head")


def test_secret_subsample_keeps_a_secret_part_of_the_batch(tiny_data):
    """Delta sums the clipped differences of the kept ids only and divides by p B; without noise the answer
    equals that float64 recomputation, and the kept set is neither empty nor the whole batch."""
    settings = tiny_settings(extra={"server_update": "sgd", "batch": "secret_subsample", "secret_rate": 0.5})
    algo = DPZV(tiny_data, settings, seed=0)
    assert algo.noise["sigma"] == 0.0
    ids = algo.clients[0].next_batch()
    msg, _ = algo.client_query(algo.clients[0], ids)
    state = algo.server.noise.get_state()
    with torch.no_grad():
        delta = algo.server.losses(msg["ids"], 0, msg["h_plus"]) - algo.server.losses(msg["ids"], 0, msg["h_minus"])
    delta = delta.double() / algo.divisor
    answer, _ = algo.server_answer(0, msg)
    gen = torch.Generator().manual_seed(0)
    gen.set_state(state)
    kept = torch.rand(len(ids), generator=gen) < 0.5
    assert 0 < int(kept.sum()) < len(ids)
    expected = delta.clamp(-algo.clip, algo.clip)[kept].sum() / (0.5 * len(ids))
    assert float(answer) == pytest.approx(float(expected), rel=1e-5, abs=1e-7)
    full = delta.clamp(-algo.clip, algo.clip).sum() / len(ids)
    assert float(answer) != pytest.approx(float(full), rel=1e-3)


def test_bad_batch_options_name_the_key(tiny_data):
    with pytest.raises(ValueError, match="batch"):
        DPZV(tiny_data, tiny_settings(extra={"batch": "hidden"}), seed=0)
    with pytest.raises(ValueError, match="secret_rate"):
        DPZV(tiny_data, tiny_settings(extra={"batch": "secret_subsample", "secret_rate": 0}), seed=0)


# ------------------------------------------------------- the bound for what the baselines' code sends


def _gdp_epsilon(mu: float, delta: float) -> float:
    """Independent mu -> eps: the root in eps of Dong, Roth and Su's GDP delta(eps) (Corollary 2.13), by scipy."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    def excess(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps + norm.logcdf(-eps / mu - mu / 2)) - delta

    return brentq(excess, 0.0, mu * mu / 2 + 10.0 * mu + 10.0, xtol=1e-12)


def _sent_closed_form(z: float, batch: int, rounds: int, delta: float = DELTA) -> float:
    """A client training its model on its raw features: mu = sqrt(B K')/z over its K' rounds."""
    return _gdp_epsilon(math.sqrt(batch * rounds) / z, delta)


def _realised_rounds(algo) -> np.ndarray:
    """Each client's rounds, counted by stepping the run's own schedule (independent of `planned_rounds`)."""
    return np.bincount([algo.next_client() for _ in range(algo.total_rounds)], minlength=algo.data.num_clients)


@pytest.mark.parametrize("z,batch,rounds", [(5.159, 64, 19 * 20), (30.0, 8, 12), (2.0, 1, 7)])
def test_trained_client_epsilon_is_sqrt_b_k_over_z(z, batch, rounds):
    """The bound the audit found for VAFL and VFL-CZOFO: each of the client's rounds from the record's first use
    may move the whole batch, mu = sqrt(B K')/z (B = 1: the fixed-model known-batch bound)."""
    eps = privacy.trained_client_epsilon(z, batch, rounds, DELTA)
    assert eps == pytest.approx(_sent_closed_form(z, batch, rounds), rel=1e-6)
    if batch > 1:
        assert eps > privacy.known_batch_epsilon(z, rounds, DELTA)


def test_baseline_records_the_bound_for_what_it_sends(tiny_data):
    """VAFL and VFL-CZOFO: sqrt(B K'_m)/z over the busiest client's rounds; ZOO-VFL's shared draw: inf (h' - h
    in clear); ZOO-VFL with independent draws: the fixed-model bound (its client moves by the server's scalars)."""
    from fedrepro.algorithms.dpzv.vfl_czofo import VFLCZOFO

    settings = tiny_settings(eps=1.0, epochs=2, extra={"embed_clip": 0.5})
    for cls in (VAFL, VFLCZOFO):
        algo = cls(tiny_data, settings, seed=0)
        rec = algo.privacy()
        busiest = int(_realised_rounds(cls(tiny_data, settings, seed=0)).max())
        assert rec["client_rounds"] == busiest
        expected = _sent_closed_form(rec["noise_multiplier"], settings.batch_size, busiest)
        assert rec["eps_sent_one_client"] == pytest.approx(expected, rel=1e-6)
        assert rec["eps_sent_one_client"] > rec["eps_known_one_client"]
    shared = ZOOVFL(tiny_data, settings, seed=0).privacy()
    assert math.isinf(shared["eps_sent_one_client"]) and math.isfinite(shared["eps_known_one_client"])
    extra = {"embed_clip": 0.5, "zoo_noise": "independent"}
    independent = ZOOVFL(tiny_data, tiny_settings(eps=1.0, epochs=2, extra=extra), seed=0).privacy()
    assert independent["eps_sent_one_client"] == independent["eps_known_one_client"]
    assert "eps_sent_one_client" not in VAFL(tiny_data, tiny_settings(epochs=1), seed=0).privacy()  # eps = inf


def test_privacy_table_prints_the_bound_for_what_the_code_sends(tiny_data, tmp_path, monkeypatch):
    """From the runs' records to the written table: each baseline row carries eps_sent_one_client beside
    eps_known_one_client (VAFL: the closed form sqrt(B K')/z; ZOO-VFL: inf) and the caption says why for each."""
    import json
    from types import SimpleNamespace

    import pandas as pd

    from fedrepro.report import dpzv as report

    settings = tiny_settings(eps=1.0, epochs=2, extra={"embed_clip": 0.5})
    paths = []
    for name, cls in (("vafl", VAFL), ("zoo_vfl", ZOOVFL)):
        record = cls(tiny_data, settings, seed=0).privacy()
        folder = tmp_path / "runs" / "digits" / name / "x" / "s0"
        folder.mkdir(parents=True)
        seed = {"best": {"test_acc": 0.5}, "privacy": record, "status": "ok", "status_reason": ""}
        variant = {"eps": 1.0, "clip": math.nan, "seeds": {"0": seed}}
        (folder / "summary.json").write_text(json.dumps({"variants": {"eps1": variant}}, default=str))
        paths.append(str(folder / "summary.json"))
    written = {}
    monkeypatch.setattr(
        report.tables, "write_table", lambda table, path, caption, *a: written.update({path: (table, caption)})
    )
    monkeypatch.setattr(report, "load_metrics", lambda p: pd.DataFrame())
    monkeypatch.setattr(report, "load_memory", lambda p: pd.DataFrame())
    monkeypatch.setattr(report, "_claim_rows", lambda *a: [])
    spec = {"scale": "quick", "decimals": 2, "clip": 10, "server_update": "sgd"}
    job = SimpleNamespace(
        spec=spec, input={"summaries": paths, "metrics": [], "memory": []}, output={"md": "c.md", "privacy_md": "p.md"}
    )
    report.claims(job)
    table, caption = written["p"]
    columns = list(table.columns)
    assert columns.index("eps_sent_one_client") == columns.index("eps_known_one_client") + 1
    rows = table.set_index("label")
    vafl = rows.loc[report.LABELS["vafl"]]
    expected = _sent_closed_form(vafl["noise_multiplier"], settings.batch_size, int(vafl["client_rounds"]))
    assert vafl["eps_sent_one_client"] == pytest.approx(expected, rel=1e-6)
    assert vafl["eps_sent_one_client"] > vafl["eps_known_one_client"]
    assert math.isinf(rows.loc[report.LABELS["zoo_vfl"], "eps_sent_one_client"])
    for method, why in privacy.CLIENT_MODEL_LEAK.items():
        assert f"{report.LABELS[method]}: {why}" in caption
