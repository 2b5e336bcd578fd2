"""Linear-probe stage of the FedSC paper (kept apart from pretraining in `jobs.py`).

`probe_job(job)` is the separate linear-probe stage (FedSC Section 7.1 "linear
evaluation"): frozen backbone features of the un-augmented training and test
images, one linear layer trained with Adam; it writes `probe.json` with per-seed
final and max test accuracy (fractions) and the run's health. Collapse is measured
where SC collapses: its loss is built on R = E[z z^T] of the projector embeddings z,
and its rank-1 point (loss -1 at the code's scale, every embedding the same vector c,
R = c c^T) is what quick runs reach. So the status is `collapsed` when the effective
rank of the UNCENTERED second moment of z on the test images (`health.effective_rank(z,
center=False)`) is below `probe.collapse_rank` (default 1.05). Measured on digits: an
untrained encoder gives 1.12-1.16, BYOL-family runs 1.10-1.13, SC-family quick runs
1.00-1.03. The centered ranks of z and of the backbone features are recorded too; they
stay at 12-23 in every case (the small spread around c is not low-rank), so they cannot
tell a collapsed run. `chance`: the probe is not above chance by 3 binomial standard errors.
`random_probe_job(job)` probes untrained backbones (one seeded initialisation per
seed): the reference row every table compares with.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from fedrepro.algorithms.fedsc.augment import AugmentConfig, plain
from fedrepro.algorithms.fedsc.base import channel_stats, mlp_head
from fedrepro.data.arrays import load_prepared
from fedrepro.fl.device import pick_device
from fedrepro.models import build_model


def probe_job(job) -> None:
    """Linear probe of every seed's trained backbone; writes probe.json."""
    device = pick_device(job.spec.get("device", "auto"))
    models = torch.load(job.input["model"], map_location=device, weights_only=False)
    _probe(job, device, {int(seed): state for seed, state in models["seeds"].items()})


def random_probe_job(job) -> None:
    """Linear probe of an untrained backbone per seed (seeded initialisation); writes probe.json."""
    _probe(job, pick_device(job.spec.get("device", "auto")), {seed: None for seed in job.seeds})


def _probe(job, device, states: dict) -> None:
    from fedrepro.eval.health import check_chance, check_collapse, effective_rank, worst
    from fedrepro.eval.probe import extract_features, linear_probe

    prepared = load_prepared(Path(job.input["data"]).parent)
    mean, std = job.spec.get("normalize_mean"), job.spec.get("normalize_std")
    if mean is None or std is None:
        mean, std = channel_stats(prepared.x_train)
    cfg = AugmentConfig(mean=tuple(mean), std=tuple(std))
    x_train, x_test = (torch.as_tensor(a, device=device) for a in (prepared.x_train, prepared.x_test))
    y_train, y_test = (torch.as_tensor(a, device=device).long() for a in (prepared.y_train, prepared.y_test))
    num_classes = int(prepared.meta.get("num_classes", int(prepared.y_train.max()) + 1))
    probe = job.spec.get("probe", {})
    threshold = float(probe.get("collapse_rank", 1.05))
    enc, head = job.spec["encoder"], job.spec["projector"]
    results = {}
    for seed, state in sorted(states.items()):
        torch.manual_seed(seed)  # the untrained reference: a seeded initialisation
        backbone = build_model(enc["name"], in_channels=x_train.shape[1], num_classes=0, **enc.get("kwargs", {}))
        projector = mlp_head(backbone.feature_dim, int(head["hidden"]), int(head["out"]))
        if state is not None:
            backbone.load_state_dict(state["backbone"])
            projector.load_state_dict(state["projector"])
        backbone.to(device)
        projector.to(device).eval()
        transform = lambda x: plain(x, cfg)  # noqa: E731
        f_train, f_test = extract_features(backbone, x_train, transform), extract_features(backbone, x_test, transform)
        out = linear_probe(
            f_train,
            y_train,
            f_test,
            y_test,
            num_classes,
            int(probe.get("epochs", 200)),
            int(probe.get("batch_size", 512)),
            float(probe.get("lr", 3e-3)),
            seed=int(seed),
        )
        with torch.no_grad():
            z = projector(f_test).double().cpu().numpy()
        # collapse (the SC loss's rank-1 point, R = E[z z^T] = c c^T): the uncentered second moment of the
        # projector embeddings has effective rank below `collapse_rank`
        rank = effective_rank(z, center=False)
        health = worst(
            check_collapse(rank, threshold),
            check_chance(out["final_acc"], 1.0 / num_classes, len(y_test), "probe accuracy"),
        )
        results[str(seed)] = {
            **out,
            "effective_rank": rank,
            "collapse_threshold": threshold,
            "embedding_rank_centered": effective_rank(z),
            "feature_rank_centered": effective_rank(f_test.double().cpu().numpy()),
            **health.as_dict(),
        }
    job.out("probe").write_text(json.dumps({"spec": job.spec, "seeds": results}, indent=2))
