"""SteFFLe (Gupta, Poornash, Lowy, Razaviyayn 2024): private and fair federated learning.

The methods of the paper's figures (Section 5, Figs. 1-5), in the order of their legends.
Traits the planner, the report and the jobs select on:

* "sgda": trained by Algorithm 1's noisy SGDA (`sgda.py`) with the section's `train` block;
  the others are re-implemented baselines (`tran2021.py`, `ling2024.py`) with their own block
  under `baselines`.
* "federated": trained on the N silos of Algorithm 3's split; "central": on one silo (N = 1,
  n~ = n), so one job serves every (N, h) panel.
* "private": trained at the figure's epsilons; the others run once at eps = inf.
* "fair": trained at every lambda of the grid; the others at lambda = 0 (no fairness term).

`TRAIN_SETTINGS` holds what makes a method of the same program differ from another: steffle_sound
is Algorithm 1 with the loss gradient g drawn on its own batch (`loss_batch: independent`), so the
clear-text g does not reveal the sensitive batch and the paper's accounting holds against the server.

Nothing heavy is imported here.
"""

from fedrepro.algorithms import Method

_SGDA = (
    "batch",
    "epochs",
    "eta_theta",
    "lr_decay",
    "decay_every",
    "eta_w",
    "w_step",
    "clip",
    "radius",
    "compat_refcode",
    "iterate",
    "eval_every",
    "sampling",
    "noise",
    "loss_batch",
    "rng",
    "refcode_hash_seed",
)


def _row(module: str, label: str, traits: str, config_keys: tuple[str, ...] = _SGDA) -> Method:
    return Method(
        entry=f"fedrepro.algorithms.steffle.{module}:run_job",
        label=label,
        traits=frozenset(traits.split()),
        config_keys=config_keys,
    )


METHODS: dict[str, Method] = {
    "steffle": _row("sgda", "SteFFLe (ours)", "sgda federated private fair"),
    "steffle_sound": _row("sgda", "SteFFLe, g on its own batch (sound)", "sgda federated private fair"),
    "steffle_nonprivate": _row("sgda", "Non-private SteFFLe", "sgda federated fair"),
    "dp_fermi": _row("sgda", "DP-FERMI (central DP SteFFLe)", "sgda central private fair"),
    "fermi": _row("sgda", "FERMI (non-private central)", "sgda central fair"),
    "tran2021": _row("tran2021", "Tran et al. (2021)", "central private fair", ("clip_primal", "alpha")),
    "ling2024": _row(
        "ling2024", "Ling et al. (2024), FedFDP", "federated private fair", ("dp_norm", "clip_norm_for_loss")
    ),
    "ling2024_groupgap": _row(
        "ling2024", "Ling et al. variant: group-gap penalty", "federated private fair", ("clip_loss", "clip_fair")
    ),
    "fedavg": _row("sgda", "Non-private non-fair FL (FedAvg)", "sgda federated"),
    "erm": _row("sgda", "Non-private non-fair central ERM", "sgda central"),
}

# train settings a method fixes whatever the config's `train` block says
TRAIN_SETTINGS: dict[str, dict] = {"steffle_sound": {"loss_batch": "independent"}}


def with_trait(trait: str) -> tuple[str, ...]:
    """The methods that have `trait`, in report order."""
    return tuple(name for name, row in METHODS.items() if trait in row.traits)


def without_trait(trait: str) -> tuple[str, ...]:
    """The methods that lack `trait`, in report order."""
    return tuple(name for name, row in METHODS.items() if trait not in row.traits)


def has_trait(method: str, trait: str) -> bool:
    """Whether `method`'s row has `trait` (read at call time, so a new row needs no other edit)."""
    return trait in METHODS[method].traits
