"""FedSC paper (Jing et al., ICML 2024): federated SSL with the spectral contrastive objective.

`METHODS` is the paper's method table, in the row order of its Table 2. Each entry is the
`run_<method>` function of the method's module that runs one pretraining job (`jobs.pretrain`);
the linear probe is the separate stage in `probing.py`, whose entries workflow/rules/fedsc.smk
names (not here: every method's code inputs would include it). Traits:

* `sc`: trained on the spectral contrastive loss (the run's spec carries mu, loss_scale, sharing);
* `byol`: the BYOL family (online/target networks and a predictor);
* `private`: shares DP-CalR correlation matrices, so it runs at every privacy level (Tables 3-5);
* `centralized`: one client holding every training image (the upper bound row of Table 2).

`config_keys` are the keys of the method's block under `fedsc.methods`. Nothing heavy is imported here.
"""

from fedrepro.algorithms import Method

_TRAIN = ("lr", "grad_clip")  # every block: the optimiser settings of the authors' configs


def _row(module_function: str, label: str, traits: tuple[str, ...] = (), keys: tuple[str, ...] = ()) -> Method:
    return Method(f"fedrepro.algorithms.fedsc.{module_function}", label, frozenset(traits), _TRAIN + keys)


METHODS: dict[str, Method] = {
    "fedavg_byol": _row("byol:run_fedavg_byol", "FedAvg + BYOL", ("byol",), ("byol",)),
    "fedavg_sc": _row("fedsc:run_fedavg_sc", "FedAvg + SC", ("sc",)),
    "fedu": _row("byol:run_fedu", "FedU", ("byol",), ("byol", "fedu")),
    "fedema": _row("byol:run_fedema", "FedEMA", ("byol",), ("byol", "fedema")),
    "fedx": _row("fedx:run_fedx", "FedX", (), ("fedx",)),
    "fedca": _row("fedca:run_fedca", "FedCA", (), ("fedca",)),
    "fedsc": _row("fedsc:run_fedsc", "FedSC (Proposed)", ("sc", "private")),
    "centralized_sc": _row("fedsc:run_centralized_sc", "Centralized SC", ("sc", "centralized")),
}
