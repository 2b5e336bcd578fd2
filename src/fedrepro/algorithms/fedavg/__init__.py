"""The `fedavg` paper key: supervised FedAvg as a standalone baseline.

FedAL and SteFFLe each run their own FedAvg inside their own experiments; this table is the
foundation's worked example of the whole chain (data, partition, training, report), and the
place to add a method to it (README, "Add a method"). Nothing heavy is imported here.
"""

from fedrepro.algorithms import Method

METHODS: dict[str, Method] = {
    "fedavg": Method(
        entry="fedrepro.algorithms.fedavg.fedavg:run_job",
        label="FedAvg",
        config_keys=(
            "model",
            "model_options",
            "rounds",
            "local_steps",
            "batch_size",
            "lr",
            "momentum",
            "weight_decay",
            "participation",
            "weighting",
            "batched",
            "eval_every",
        ),
    ),
}
