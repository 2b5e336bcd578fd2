"""Per-round trace of one FedSC stand-in run: when its embeddings collapse and what the loss terms do.

    nice .venv/bin/python benchmarks/fedsc_collapse_trace.py RESULTS textures fedsc/full_epsinf 0
    nice .venv/bin/python benchmarks/fedsc_collapse_trace.py RESULTS textures fedsc/full_epsinf 0 '{"mu": null}'

RESULTS: the results folder of a finished `fedsc_standin` (its prepared data, partition and the run's
summary.json, whose spec is re-run here: one seed, one CPU thread, with `change` merged into the spec one
level deep). Every round it prints one JSON line and writes the rows to `<RESULTS>/fedsc/trace/<...>.csv`
(or under `--out`):
* `rank`: effective rank of the centered projector outputs z of the global model on the test images (the
  probe's collapse measure, fedrepro.eval.health; below 2 is `collapsed`), `rank_clipped` the same of
  NormClip(z), `norm2` the mean ||z||^2 (NormClip's radius^2 is `mu`), `class_cos` the mean cosine between
  the ten classes' mean embeddings;
* the terms of Eq. 80 on one batch of each client after its local epochs (NormClipped views): `tr_r_plus`
  (Tr R+), `r_norm2` (||R||^2), `tr_r_r_minus` (Tr(R R_-j), R_-j the leave-one-out matrix it trained against);
* `shared_top`: the share of the broadcast matrix's largest eigenvalue; `update_cos`: the mean pairwise cosine
  of the clients' weight updates (1: every client moved the model the same way).
The seed and random stream are the pipeline's (the measurements draw their own views, then restore the stream),
but one thread and this process give other floating-point sums than the job's, so a trace follows the job's
run in kind, not digit by digit.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fedsc_seed_cost import run_arguments, stored_run  # noqa: E402

from fedrepro.algorithms.fedsc.augment import plain  # noqa: E402
from fedrepro.algorithms.fedsc.fedsc import FedSC  # noqa: E402
from fedrepro.algorithms.fedsc.jobs import load_data  # noqa: E402
from fedrepro.algorithms.fedsc.loss import positive_trace  # noqa: E402
from fedrepro.algorithms.fedsc.server import client_leave_one_out  # noqa: E402
from fedrepro.eval.health import effective_rank  # noqa: E402
from fedrepro.fl import seeding  # noqa: E402
from fedrepro.privacy.mechanisms import normclip  # noqa: E402


class TracedFedSC(FedSC):
    """FedSC that keeps, per round, each client's loss terms and weight update."""

    def client_update(self, j, weights, t, lr):
        state, loss = super().client_update(j, weights, t, lr)
        stream = self.gen.get_state()  # the measurement's views leave the run's random stream as it was
        self.updates.append(torch.cat([(state[k].float() - weights[k].float()).flatten() for k in sorted(state)]))
        with torch.no_grad():
            views = normclip(self.views(self.work, self.data.client_x(j)[:64]), self.mu)
            flat = views.flatten(0, 1)
            r = flat.T @ flat / flat.shape[0]
            cross = float("nan")
            if j in self.received:
                cross = float((r * client_leave_one_out(self.received[j], self.own[j], self.q[j])).sum())
            self.terms.append([float(positive_trace(views)), float((r * r).sum()), cross])
        self.gen.set_state(stream)
        return state, loss


def mean_cosine(vectors: list[torch.Tensor]) -> float:
    m = torch.stack(vectors)
    m = m / m.norm(dim=1, keepdim=True).clamp_min(1e-12)
    cos = (m @ m.T).numpy()
    return float(cos[~np.eye(len(vectors), dtype=bool)].mean())


def embedding_measures(alg: FedSC) -> dict:
    alg.net.eval()
    with torch.no_grad():
        z = alg.net(plain(alg.data.x_test, alg.aug_cfg)).double()
    clipped = normclip(z, alg.mu).numpy()
    z, y = z.numpy(), alg.data.y_test.numpy()
    means = np.stack([z[y == c].mean(0) for c in np.unique(y)])
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    cos = means @ means.T
    return {
        "rank": effective_rank(z),
        "rank_clipped": effective_rank(clipped),
        "norm2": float((z**2).sum(1).mean()),
        "class_cos": float(cos[~np.eye(len(means), dtype=bool)].mean()),
    }


def trace(results: Path, dataset: str, run: str, seed: int, change: dict) -> pd.DataFrame:
    spec, job = stored_run(results, dataset, run, seed, change)
    torch.set_num_threads(1)
    seeding.seed_everything(seed)
    alg = TracedFedSC(spec, load_data(job, "cpu"), seed, "cpu")
    rows = []
    for t in range(1, int(spec["rounds"]) + 1):
        alg.terms, alg.updates = [], []
        info = alg.round(t)
        terms = np.array(alg.terms)
        shared = alg.received.get(0)
        eigen = np.linalg.eigvalsh(shared.double().numpy()) if shared is not None else None
        row = {"round": t, "alpha": info.get("alpha", 1.0), "loss": info["loss"], **embedding_measures(alg)}
        row.update(
            tr_r_plus=terms[:, 0].mean(), r_norm2=terms[:, 1].mean(), tr_r_r_minus=terms[:, 2].mean()
        )  # nan without sharing
        row.update(shared_top=eigen[-1] / eigen.sum() if eigen is not None else float("nan"))
        row.update(update_cos=mean_cosine(alg.updates))
        rows.append(row)
        print(json.dumps({k: round(float(v), 3) for k, v in row.items()}), flush=True)
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    run_arguments(parser)
    parser.add_argument(
        "change", nargs="?", default="{}", help="JSON merged into the run's spec, e.g. '{\"mu\": null}'"
    )
    parser.add_argument("--out", type=Path, help="folder of the CSV (default: RESULTS/fedsc/trace)")
    args = parser.parse_args()
    change = json.loads(args.change)
    frame = trace(args.results, args.dataset, args.run, args.seed, change)
    tag = "_".join(f"{k}{v}" for k, v in change.items()).replace(" ", "")
    out = (args.out or args.results / "fedsc" / "trace") / (
        f"{args.dataset}_{args.run.replace('/', '_')}_s{args.seed}{'_' + tag if tag else ''}.csv"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out, index=False)
    print(out)


if __name__ == "__main__":
    main()
