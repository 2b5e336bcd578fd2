"""DPZV (Zhang et al.): zeroth-order vertical FL with scalar Gaussian DP, and its baselines.

All four methods share one asynchronous one-client-per-round VFL simulation
(`base.py`); they differ only in what a client sends, what the server returns
and how each side updates. One module per method (`dpzv.py`, `vafl.py`,
`zoo_vfl.py`, `vfl_czofo.py`), each with its algorithm class (`ALGORITHM`) and
its pipeline entry `run_job`; `jobs.py` is the pipeline plumbing, `memory.py`
Figure 6's peak-memory job, `zo.py` the zeroth-order estimator.

`METHODS` is the method table, in the order of the paper's figure legends. Traits:
`zeroth_order` (a zeroth-order estimate replaces backpropagation somewhere between
client and server) or `first_order`; the claims table compares DPZV with the other
zeroth-order methods first, then with first-order VAFL (Section 7, Figure 2's caption:
DPZV "outperforms first-order VFL methods" and "surpasses all other ZO-based methods"). `config_keys` are
the keys of `dpzv.shared` the method reads beyond the keys every method reads
(`fedrepro.experiments.dpzv.COMMON_KEYS`): a run's spec holds only those, so
changing one method's option re-runs only that method. No heavy imports here.
"""

from fedrepro.algorithms import Method

METHODS: dict[str, Method] = {
    "dpzv": Method(
        entry="fedrepro.algorithms.dpzv.dpzv:run_job",
        label="DPZV",
        traits=frozenset({"zeroth_order"}),
        config_keys=(
            "zo_lambda",
            "clip_mode",
            "fd_denominator",
            "direction",
            "zo_momentum",
            "server_update",
            "momentum",
            "table_update",
            "label_privacy",
            "head_clip",
            "batch",
            "secret_rate",
            "stack_clients",
        ),
    ),
    "vafl": Method(
        entry="fedrepro.algorithms.dpzv.vafl:run_job",
        label="VAFL",
        traits=frozenset({"first_order"}),
        config_keys=("embed_clip", "momentum", "stack_clients"),
    ),
    "zoo_vfl": Method(
        entry="fedrepro.algorithms.dpzv.zoo_vfl:run_job",
        label="ZOO-VFL",
        traits=frozenset({"zeroth_order"}),
        config_keys=(
            "embed_clip",
            "zo_lambda",
            "direction",
            "zo_momentum",
            "zoo_pair_release",
            "zoo_noise",
            "server_update",
            "momentum",
            "stack_clients",
        ),
    ),
    "vfl_czofo": Method(
        entry="fedrepro.algorithms.dpzv.vfl_czofo:run_job",
        label="VFL-CZOFO",
        traits=frozenset({"zeroth_order"}),
        config_keys=("embed_clip", "momentum", "zo_lambda", "perturbations", "stack_clients"),
    ),
}
