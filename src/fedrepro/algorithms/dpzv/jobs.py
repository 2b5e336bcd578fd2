"""Pipeline entry shared by the four VFL methods: data loading, settings, variants, seeds.

A job runs one method on one data set for a list of privacy variants
(`spec["variants"]`, each an eps and, for DPZV, a clip threshold C and a calibration: the paper's, or
`sound` with its options) and the job's
seeds. Quick scale batches several variants in one job to save process
start-up; paper scale runs one variant per job. Each variant runs through
`fedrepro.fl.runner.run_seeds` with its own checkpoint folder, so a killed job
resumes where it stopped.

One round of the shared loop (`fedrepro.fl.loop`) is one evaluation period:
1/evals_per_epoch of an epoch, i.e. M floor(D/B) / evals_per_epoch server rounds,
one row of the metrics. `checkpoint_every` counts these loop rounds, as for
every paper (with evals_per_epoch = 1, one checkpoint per epoch).

Outputs: `metrics` (Parquet: one row per evaluation block with seed, variant,
eps, clip) and `summary` (JSON: the spec and, per variant, the per-seed
summaries: best-validation test accuracy and the privacy record).
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pandas as pd
import torch

from fedrepro.algorithms.dpzv.base import VFLData, VFLSettings, build_vfl_data
from fedrepro.atomic import atomic_write, atomic_write_text
from fedrepro.fl.device import pick_device
from fedrepro.fl.runner import run_seeds
from fedrepro.pipeline import Job, claim_scratch, number_tag
from fedrepro.privacy.dpzv import parse_clip, parse_eps
from fedrepro.store import Store, state_of

SETTING_KEYS = (
    "batch_size",
    "epochs",
    "evals_per_epoch",
    "client_model",
    "client_kwargs",
    "embed_dim",
    "server_hidden",
    "lr_server",
    "lr_client",
    "momentum",
    "delta",
    "schedule",
    "client_weights",
    "table_init",
    "library_accountant",
    "record_wire",
    "eval_batch",
)
DATA_KEYS = ("val", "val_fraction", "split_seed")


def load_job_data(job: Job, device: torch.device) -> VFLData:
    """Prepared arrays (input `data`: arrays.npz) split by the vertical partition (input `partition`)."""
    from fedrepro.data.arrays import load_prepared
    from fedrepro.data.partition import load_partition

    prepared = load_prepared(Path(job.input["data"]).parent)
    part = load_partition(job.input["partition"])
    if part.kind != "vertical":
        raise ValueError(f"dpzv needs a vertical partition, got a {part.kind} one ({job.input['partition']})")
    return vfl_data_from(prepared, part, job.spec, device)


def vfl_data_from(prepared, part, spec: dict, device: torch.device) -> VFLData:
    """Prepared arrays split by a vertical partition, with the spec's validation split (DATA_KEYS)."""
    return build_vfl_data(
        prepared.x_train,
        prepared.y_train,
        prepared.x_test,
        prepared.y_test,
        part.features,
        part.feature_shapes,
        int(prepared.meta["num_classes"]),
        prepared.meta["kind"],
        val=spec.get("val", "holdout"),
        val_fraction=spec.get("val_fraction", 0.1),
        split_seed=spec.get("split_seed", 0),
        device=device,
    )


def settings_for(spec: dict, variant: dict) -> VFLSettings:
    """VFLSettings of one variant: the shared keys, eps from the variant, method options in `extra`."""
    known = {k: spec[k] for k in SETTING_KEYS if k in spec}
    extra = {
        k: v
        for k, v in spec.items()
        if k not in SETTING_KEYS and k not in DATA_KEYS and k not in ("variants", "device", "dataset", "method")
    }
    extra.update({k: v for k, v in variant.items() if k not in ("eps", "tag")})
    return VFLSettings(**known, eps=parse_eps(variant["eps"]), extra=extra)


def variant_tag(variant: dict) -> str:
    """`eps1-C10`, and the calibration where it is not the paper's (`eps1-C10-sound`), as the planner names it."""
    tag = f"eps{number_tag(parse_eps(variant['eps']))}"
    if "clip" in variant:
        tag += f"-C{number_tag(parse_clip(variant['clip']))}"
    if variant.get("calibration", "paper") != "paper":
        tag += f"-{variant['calibration']}"
    return tag


def cell_store(job: Job) -> Store:
    """Finished privacy variants (`fedrepro.store`), shared by every job of the same (data set, method):
    runs/<dataset>/<method>/_cells/ beside the jobs' own runs/.../<setting>/<seeds>/. Quick scale
    batches variants into jobs, so adding one eps renames the job; the store lets the new job reuse
    every variant already finished under the same settings, seeds, inputs and code."""
    return Store(Path(job.output["summary"]).parents[2] / "_cells", job)


def cell_slot(job: Job, tag: str) -> str:
    """One variant of one seed list: `<variant>/<seeds>`."""
    return f"{tag}/{Path(job.output['summary']).parent.name}"


def cell_state(job: Job, variant: dict) -> str:
    """What one variant's results depend on: the job's spec without the variant list, this variant,
    the seeds and every input file (code fingerprints included)."""
    spec = {k: v for k, v in job.spec.items() if k != "variants"}
    return state_of(job, {**spec, "variant": variant}, job.seeds)


def load_cell(store: Store, slot: str, state: str):
    """(metrics, seeds' summaries) of a finished variant, else None."""
    return store.load(
        slot,
        state,
        lambda folder: (
            pd.read_parquet(folder / "metrics.parquet"),
            json.loads((folder / "summary.json").read_text())["seeds"],
        ),
    )


def save_cell(store: Store, slot: str, state: str, metrics: pd.DataFrame, seeds: dict) -> None:
    text = json.dumps({"seeds": seeds}, indent=2, default=_json_default)
    store.save(
        slot,
        state,
        {
            "metrics.parquet": lambda tmp: metrics.to_parquet(tmp, index=False),
            "summary.json": lambda tmp: tmp.write_text(text),
        },
    )


def run_vfl_job(job: Job, algorithm_class) -> None:
    """Run `algorithm_class` for every variant and seed of the job; write metrics and summary."""
    torch.set_num_threads(max(1, int(job.threads)))
    claim_scratch(job)  # before the variants' sub-jobs reuse anything under it
    device = pick_device(job.spec.get("device", "auto"))
    variants = job.spec.get("variants") or [{"eps": "inf"}]
    data = None
    frames, summaries = [], {}
    for variant in variants:
        tag = variant_tag(variant)
        eps = parse_eps(variant["eps"])
        clip = parse_clip(variant["clip"]) if "clip" in variant else math.nan
        labels = {"eps": eps, "clip": clip, "calibration": variant.get("calibration", "paper")}
        store, slot, state = cell_store(job), cell_slot(job, tag), cell_state(job, variant)
        cached = load_cell(store, slot, state)
        if cached is not None:
            frames.append(cached[0])
            summaries[tag] = {**labels, "seeds": cached[1]}
            continue
        if data is None:
            data = load_job_data(job, device)
        settings = settings_for(job.spec, variant)
        sub = Job(
            spec=job.spec,
            seeds=job.seeds,
            threads=job.threads,
            scratch=job.scratch / tag,
            script=job.script,
            results=job.results,
            code=job.code,
            output={
                "metrics": str(job.scratch / tag / "metrics.parquet"),
                "summary": str(job.scratch / tag / "summary.json"),
            },
        )
        build = functools.partial(algorithm_class, data, settings, device=device)
        metrics = run_seeds(
            sub,
            build,
            settings.epochs * settings.evals_per_epoch,
            eval_every=1,
        ).assign(variant=tag, **labels)
        seeds = json.loads(Path(sub.output["summary"]).read_text())["seeds"]
        save_cell(store, slot, state, metrics, seeds)
        frames.append(metrics)
        summaries[tag] = {**labels, "seeds": seeds}
    metrics = pd.concat(frames, ignore_index=True)
    atomic_write(job.out("metrics"), lambda tmp: metrics.to_parquet(tmp, index=False))
    summary = {"spec": job.spec, "variants": summaries}
    atomic_write_text(job.out("summary"), json.dumps(summary, indent=2, default=_json_default))


def _json_default(value):
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return float(value)
