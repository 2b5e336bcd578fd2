"""FedProto adapted to unlabelled public data (paper Sec. VI baselines; spec §3.3, §8 item 15).

The paper: "clients and the server conduct KD using the intermediate features
before the fully-connected layer of client models, instead of model outputs in
FedMD", adapted "to incorporate unlabeled public data". So this is FedMD with
features in place of logits:

* local stage: tau steps of cross-entropy on private batches;
* global stage: tau iterations; each client uploads its features h_n(x) on the
  shared public batch (d*B floats), the server replies with the average
  features, and the client minimises `proto_weight` * MSE(h_n(x), h_bar_{-n}(x))
  (leave-one-out average, mean over elements as in FedProto's MSELoss).

Only applicable when every architecture has the same feature dimension (the
paper's reason for leaving it out on SVHN); a mixed pool raises a clear error.
DECISION (spec §8 item 15): the labelled-prototype regulariser of the original
FedProto is not added; the adaptation is the feature-KD on public data above.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F

from fedrepro.algorithms.fedal.federation import FedData, Federation, TrainConfig, mean_of
from fedrepro.algorithms.fedal.kd import leave_one_out


class FeatureAverager:
    """The FedProto server: receives features on public data, returns their average."""

    def respond(self, features: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.stack([h.detach() for h in features]).mean(dim=0)


class FedProto(Federation):
    def __init__(self, data: FedData, pool: Sequence[Mapping], cfg: TrainConfig, seed: int,
                 proto_weight: float = 1.0, assignment: Sequence[int] | None = None):
        super().__init__(data, pool, cfg, seed, assignment)
        dims = {c.model.feature_dim for c in self.clients}
        if len(dims) != 1:
            archs = sorted({c.model.arch for c in self.clients})
            raise ValueError(f"fedproto needs one feature dimension across client models; "
                             f"the pool {archs} gives {sorted(dims)}")
        self.proto_weight = proto_weight
        self.server = FeatureAverager()

    def round(self, t: int) -> dict:
        self.wire.round = t
        ce = self.local_supervised_stage()
        mse = []
        for _ in range(self.cfg.tau):
            mse.append(self._global_iteration())
        return {"ce": ce, "proto_mse": mean_of(mse)}

    def _global_iteration(self) -> torch.Tensor:
        feats, uploads = [], []
        for client in self.clients:
            _, xb = client.public_batch()
            h = client.model.features(xb)
            feats.append(h)
            uploads.append(self.wire.send(client.name, "server", "features", h.detach()))
        mean = self.server.respond(uploads)
        losses = []
        for n, client in enumerate(self.clients):
            target = self.wire.send("server", client.name, "mean_features", mean)
            loss = self.proto_weight * F.mse_loss(
                feats[n], leave_one_out(target, feats[n].detach(), self.num_clients))
            client.step(loss)
            losses.append(loss.detach())
        self.iteration += 1
        return mean_of(losses)


def build(data: FedData, pool: list, cfg: TrainConfig, seed: int, spec: dict) -> FedProto:
    return FedProto(data, pool, cfg, seed, proto_weight=float(spec.get("proto_weight", 1.0)))


def run_job(job) -> None:
    from fedrepro.algorithms.fedal.jobs import run

    run(job, build)
