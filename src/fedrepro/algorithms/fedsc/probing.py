"""Linear-probe stage of the FedSC paper (kept apart from pretraining in `jobs.py`).

`probe_job(job)` is the separate linear-probe stage (FedSC Section 7.1 "linear
evaluation"): frozen backbone features of the un-augmented training and test
images, one linear layer trained with Adam; it writes `probe.json` with per-seed
final and max test accuracy (fractions) and the run's health.

Collapse is measured on the projector embeddings z of the test images (the space the SSL loss
shapes) and compared with an untrained encoder of the same architecture and seed. A run is
`collapsed` when
* its relative spread E||z - E z||^2 / E||z||^2 is below `probe.collapse_spread` (1e-3) times the
  untrained encoder's (complete collapse: every input one vector, the SC loss's rank-1 point
  R = E[z z^T] = c c^T), or
* the effective rank of the centered covariance of z is below `probe.collapse_rank` (2: the
  embeddings vary along one direction; dimensional collapse).
Both are relative or scale-free, so one pair of values serves every scale. Measured on digits
(quick scale, seeds 0-1): an untrained encoder's projector output already sits on a narrow cone
(relative spread 0.016-0.019, uncentered effective rank 1.13-1.16); trained runs keep 0.02-1.8 times
that spread (Centralized SC 0.02-0.06, FedAvg+SC and FedSC 0.15-0.25, FedCA 0.28-0.83, BYOL family
0.63-0.86, FedX 1.3-1.8) and centered ranks 11-20, and their kNN accuracy on z (0.67-0.77) and
linear probe (0.76-0.87) are far above chance: none is a constant map, while a projector squeezed
to one vector (weights x 1e-3, a bias of ones) gives 1e-8. The uncentered effective rank
(`effective_rank`, recorded) is a continuum from 1.00 to 1.27 across these runs, the untrained
one's inside it, so no threshold on it separates collapse from a healthy run whose embeddings share
a large common offset.
`chance`: the probe is not above chance by 3 binomial standard errors.
`random_probe_job(job)` probes untrained backbones (one seeded initialisation per
seed): the reference row every table compares with.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
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
    from fedrepro.eval.health import check_chance, effective_rank, embedding_collapse, worst
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
    min_spread, min_rank = float(probe.get("collapse_spread", 1e-3)), float(probe.get("collapse_rank", 2.0))
    enc, head = job.spec["encoder"], job.spec["projector"]
    results = {}
    for seed, state in sorted(states.items()):
        torch.manual_seed(seed)  # the untrained reference: a seeded initialisation
        backbone = build_model(enc["name"], in_channels=x_train.shape[1], num_classes=0, **enc.get("kwargs", {}))
        projector = mlp_head(backbone.feature_dim, int(head["hidden"]), int(head["out"]))
        backbone.to(device)
        projector.to(device).eval()
        transform = lambda x: plain(x, cfg)  # noqa: E731
        untrained = _embed(projector, extract_features(backbone, x_test, transform))
        if state is not None:
            backbone.load_state_dict(state["backbone"])
            projector.load_state_dict(state["projector"])
        f_train, f_test = extract_features(backbone, x_train, transform), extract_features(backbone, x_test, transform)
        out = linear_probe(
            f_train,
            y_train,
            f_test,
            y_test,
            num_classes,
            int(probe.get("epochs", 50)),
            int(probe.get("batch_size", 128)),
            float(probe.get("lr", 3e-3)),
            seed=int(seed),
        )
        collapse, measures = embedding_collapse(_embed(projector, f_test), untrained, min_spread, min_rank)
        health = worst(collapse, check_chance(out["final_acc"], 1.0 / num_classes, len(y_test), "probe accuracy"))
        results[str(seed)] = {
            **out,
            **measures,
            "collapse_spread": min_spread,
            "collapse_rank": min_rank,
            "feature_rank_centered": effective_rank(f_test.double().cpu().numpy()),
            **health.as_dict(),
        }
    job.out("probe").write_text(json.dumps({"spec": job.spec, "seeds": results}, indent=2))


@torch.no_grad()
def _embed(projector, features) -> np.ndarray:
    return projector(features).double().cpu().numpy()
