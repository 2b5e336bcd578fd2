"""Planner of the `fedavg` paper key: supervised FedAvg as a standalone baseline.

One run per configured method of the table (fedrepro.algorithms.fedavg, in its order) and
Dirichlet alpha; the report is a table of final test accuracy per method and alpha and a
figure of test accuracy against rounds.
"""

from __future__ import annotations

from fedrepro.algorithms import method_table
from fedrepro.data.partition import make_tag
from fedrepro.experiments import Run, training_options
from fedrepro.pipeline import number_tag

PAPER = "fedavg"


def partition_tag(section: dict, alpha: float) -> str:
    part = section["partition"]
    return make_tag("dirichlet", alpha=alpha, clients=part["num_clients"], seed=part["seed"])


def configured_methods(section: dict) -> list[str]:
    """The table's methods that have a config block, in the table's order."""
    return [method for method in method_table(PAPER) if method in section["methods"]]


def runs(config: dict) -> list[Run]:
    section = config[PAPER]
    out = []
    for method in configured_methods(section):
        settings = section["methods"][method]
        for alpha in section["partition"]["alphas"]:
            spec = {
                **settings,
                "device": config.get("device", "auto"),
                **training_options(config),
            }
            out.append(Run(section["dataset"], method, f"a{number_tag(alpha)}", spec, partition_tag(section, alpha)))
    return out


def check(config: dict) -> list[str]:
    """Errors a schema cannot express: more clients than training samples, a model that does
    not fit the data set."""
    from fedrepro.experiments.fit import dataset_size_errors, model_fit_errors

    section = config[PAPER]
    errors = dataset_size_errors(
        f"{PAPER}.partition.num_clients", section["dataset"], section["partition"]["num_clients"]
    )
    unknown = sorted(set(section["methods"]) - set(method_table(PAPER)))
    if unknown:
        errors.append(
            f"config key '{PAPER}.methods': {unknown} not in the method table (fedrepro.algorithms.fedavg.METHODS)"
        )
    for method, settings in section["methods"].items():
        errors += model_fit_errors(
            f"{PAPER}.methods.{method}.model_options",
            settings.get("model_options", {}),
            section["dataset"],
            config.get("datasets", {}).get(section["dataset"]),
        )
    return errors
