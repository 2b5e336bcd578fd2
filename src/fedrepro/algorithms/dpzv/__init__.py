"""DPZV (Zhang et al.): zeroth-order vertical FL with scalar Gaussian DP, and its baselines.

All four methods share one asynchronous one-client-per-round VFL simulation
(`vfl.py`); they differ only in what a client sends, what the server returns
and how each side updates. No heavy imports here.
"""

METHODS: dict[str, str] = {
    "dpzv": "fedrepro.algorithms.dpzv.dpzv:run_job",
    "vafl": "fedrepro.algorithms.dpzv.vafl:run_job",
    "zoo_vfl": "fedrepro.algorithms.dpzv.zoo_vfl:run_job",
    "vfl_czofo": "fedrepro.algorithms.dpzv.czofo:run_job",
}
