"""What the quick run does not repeat: the accountant's calibration of one privacy variant (1-2 s) runs once per
job, not once per seed, and the records stay what a fresh computation gives."""

import pytest

from fedrepro.algorithms.dpzv.dpzv import DPZV
from fedrepro.algorithms.dpzv.vafl import VAFL
from fedrepro.privacy import accountant
from fedrepro.privacy import dpzv as privacy
from tests.dpzv.conftest import tiny_settings


@pytest.mark.parametrize("cls", [DPZV, VAFL])
def test_the_seeds_of_one_variant_share_one_calibration(cls, tiny_data, monkeypatch):
    calls = []
    real = accountant.tight_epsilon
    monkeypatch.setattr(accountant, "tight_epsilon", lambda *a, **k: calls.append(a) or real(*a, **k))
    privacy._library_and_pld.cache_clear()
    settings = tiny_settings(eps=1.0, extra={"server_update": "sgd", "embed_clip": 1.0})
    first, second = (cls(tiny_data, settings, seed=seed).privacy() for seed in (0, 1))
    assert len(calls) == 1
    privacy._library_and_pld.cache_clear()
    fresh = cls(tiny_data, settings, seed=2).privacy()
    assert len(calls) == 2
    keys = ("eps_library", "eps_pld", "sigma", "noise_multiplier")
    assert [first[k] for k in keys] == [second[k] for k in keys] == [fresh[k] for k in keys]
    other = cls(tiny_data, tiny_settings(eps=2.0, extra={"server_update": "sgd", "embed_clip": 1.0}), seed=0).privacy()
    assert other["eps_pld"] != first["eps_pld"] and len(calls) == 3  # another eps is another calibration
