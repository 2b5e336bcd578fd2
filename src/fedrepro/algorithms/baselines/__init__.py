"""Baselines shared by several papers."""

METHODS: dict[str, str] = {
    "fedavg": "fedrepro.algorithms.baselines.fedavg:run_job",
}
