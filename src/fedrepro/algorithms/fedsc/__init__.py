"""FedSC paper (Jing et al., ICML 2024): federated SSL with the spectral contrastive objective.

Methods: FedSC (Algorithms 1 and 2), FedAvg+SC, FedAvg+BYOL, FedU, FedEMA, FedX,
FedCA and Centralized SC. Each maps to the "module:function" that runs one
pretraining job; the linear probe is the separate stage in `probing.py`, whose
entries workflow/rules/fedsc.smk names (not here: every method's code inputs would include it).
Nothing heavy is imported here.
"""

METHODS = {
    "fedsc": "fedrepro.algorithms.fedsc.entries:fedsc",
    "fedavg_sc": "fedrepro.algorithms.fedsc.entries:fedavg_sc",
    "fedavg_byol": "fedrepro.algorithms.fedsc.entries:fedavg_byol",
    "fedu": "fedrepro.algorithms.fedsc.entries:fedu",
    "fedema": "fedrepro.algorithms.fedsc.entries:fedema",
    "fedx": "fedrepro.algorithms.fedsc.entries:fedx",
    "fedca": "fedrepro.algorithms.fedsc.entries:fedca",
    "centralized_sc": "fedrepro.algorithms.fedsc.entries:centralized_sc",
}
