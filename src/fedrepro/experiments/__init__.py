"""Planners: each paper's config section turned into runs and report targets.

Pure Python (no torch), imported by the Snakemake files and tested by pytest.
A `Run` is one training job's identity and the spec it depends on; the spec
holds only the settings that job reads, so Snakemake re-runs exactly the jobs
whose settings changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fedrepro.options import TRAINING_DEFAULTS
from fedrepro.pipeline import seed_batches, seed_tag


@dataclass(frozen=True)
class Run:
    dataset: str
    method: str
    setting: str
    spec: dict = field(hash=False, compare=False)
    partition: str | None = None  # partition tag, when the run reads one
    seeds: tuple[str, ...] = field(default=(), compare=False)  # its {seeds} wildcards; () = the paper's (`seed_tags`)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.dataset, self.method, self.setting)

    def folder(self, results: str, paper: str, seeds: str) -> str:
        return f"{results}/{paper}/runs/{self.dataset}/{self.method}/{self.setting}/{seeds}"


def seed_tags(section: dict) -> list[str]:
    """The {seeds} wildcard values of a paper section (`seeds`, `seeds_per_job`)."""
    seeds = list(section["seeds"])
    return [seed_tag(batch) for batch in seed_batches(seeds, section.get("seeds_per_job", len(seeds)))]


def index(runs: list[Run]) -> dict[tuple[str, str, str], Run]:
    """Runs by (dataset, method, setting); duplicate keys are a planner bug."""
    table: dict[tuple[str, str, str], Run] = {}
    for run in runs:
        if run.key in table:
            raise ValueError(f"two runs share the key {run.key}")
        table[run.key] = run
    return table


def training_options(config: dict) -> dict:
    """`precision`, `channels_last` and `compile` for the spec of a job that honours them: only values that
    differ from the defaults, so adding these keys changed (and re-ran) no job that keeps fp32."""
    return {key: config[key] for key, default in TRAINING_DEFAULTS.items() if config.get(key, default) != default}
