"""FedProto (Tan et al., AAAI 2022; the FedAL paper's ref. [12]) as the FedAL paper adapts it,
and FedProto's own algorithm.

`variant: public_features` (default; what the FedAL tables run) is the FedAL paper's adaptation
(Sec. VI-A, baselines: "we adapt FedProto to incorporate unlabeled public data"; "KD using the
intermediate features before the fully-connected layer instead of model outputs in FedMD"), whose
details the paper does not give: FedMD with features in place of logits. Local stage: tau CE
steps; global stage: tau iterations in which each client uploads its features h_n(x) on the
shared public batch (d*B floats), the server replies with the average, and the client minimises
`proto_weight` * MSE(h_n(x), h_bar_{-n}(x)) (leave-one-out average, as FedAL's eq. (5)).

`variant: prototypes` is FedProto's own algorithm (its Algorithm 1):
* each client takes tau steps of CE + `proto_weight` * MSE(h_n(x), C_bar^(y)) on private
  batches (eq. (4); the regulariser only for labels with a global prototype so far), and
  averages its features per label over those batches (its local prototypes C_n^(j), eq. (2));
* it uploads its local prototypes and per-label counts (K*d + K floats); the server's global
  prototype C_bar^(j) averages the local prototypes of the clients that hold label j, either
  unweighted (`prototype_average: unweighted`, default: the authors' code, `proto_aggregation`)
  or weighted by |D_n,j| (`count`: FedProto's eq. (3)), and is sent back to every client. No
  public data.

Both need one feature dimension across the pool (the paper's reason for leaving FedProto out
on SVHN); a mixed pool raises a clear error.

`batched` (spec key, default on a GPU): the clients of one architecture train as one program
(base.Federation, fl.batched.Stack) with the per-client loop's batches, losses, updates and messages;
the features, prototypes and regulariser are computed per client along the stacked axis
(tests/fedal/test_batched_baselines.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F

from fedrepro.algorithms.fedal.base import FedData, Federation, TrainConfig, device_mean, mean_of
from fedrepro.algorithms.fedal.client import cross_entropy
from fedrepro.algorithms.fedal.kd import leave_one_out


class FeatureAverager:
    """The FedProto server: receives features on public data, returns their average."""

    def respond(self, features: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.stack([h.detach() for h in features]).mean(dim=0)


VARIANTS = ("prototypes", "public_features")


AVERAGES = ("unweighted", "count")


class PrototypeServer:
    """FedProto's server: per label, the average of the local prototypes of the clients holding it,
    unweighted (the authors' code) or weighted by the clients' label counts (FedProto's eq. (3))."""

    def __init__(self, average: str = "unweighted"):
        if average not in AVERAGES:
            raise ValueError(f"fedproto.prototype_average {average!r} is not one of {', '.join(AVERAGES)}")
        self.average = average

    def respond(self, uploads: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        protos = torch.stack([u["prototypes"] for u in uploads])  # (N, K, d)
        counts = torch.stack([u["counts"] for u in uploads])  # (N, K)
        weights = counts if self.average == "count" else (counts > 0).to(counts.dtype)
        total = weights.sum(0)
        known = total > 0
        merged = torch.zeros_like(protos[0])
        merged[known] = (weights[:, :, None] * protos).sum(0)[known] / total[known, None]
        return {"prototypes": merged, "known": known.to(protos.dtype)}


class FedProto(Federation):
    def __init__(
        self,
        data: FedData,
        pool: Sequence[Mapping],
        cfg: TrainConfig,
        seed: int,
        proto_weight: float = 1.0,
        variant: str = "public_features",
        prototype_average: str = "unweighted",
        assignment: Sequence[int] | None = None,
        batched: bool = False,
    ):
        if variant not in VARIANTS:
            raise ValueError(f"fedproto.variant {variant!r} is not one of {', '.join(VARIANTS)}")
        self.variant = variant
        self.uses_public = variant == "public_features"
        super().__init__(data, pool, cfg, seed, assignment, batched)
        dims = {c.model.feature_dim for c in self.clients}
        if len(dims) != 1:
            archs = sorted({c.model.arch for c in self.clients})
            raise ValueError(
                f"fedproto needs one feature dimension across client models; the pool {archs} gives {sorted(dims)}"
            )
        self.proto_weight = proto_weight
        self.server = FeatureAverager() if variant == "public_features" else PrototypeServer(prototype_average)
        k, d = data.num_classes, dims.pop()
        self.prototypes = torch.zeros(k, d, device=data.test_x.device)
        self.known = torch.zeros(k, dtype=torch.bool, device=data.test_x.device)

    def round(self, t: int) -> dict:
        self.wire.round = t
        if self.variant == "prototypes":
            return self._prototype_round()
        ce = self.local_supervised_stage()
        mse = []
        for _ in range(self.cfg.tau):
            mse.append(self._global_iteration())
        if self.batched:  # each iteration's mean read in one copy, then averaged on the host as the loop does
            mse = torch.stack(mse).tolist()
        return {"ce": ce, "proto_mse": mean_of(mse)}

    def _global_iteration(self) -> torch.Tensor:
        if self.batched:
            return self._global_iteration_batched()
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
            loss = self.proto_weight * F.mse_loss(feats[n], leave_one_out(target, feats[n].detach(), self.num_clients))
            client.step(loss)
            losses.append(loss.detach())
        self.iteration += 1
        return mean_of(losses)

    def _global_iteration_batched(self) -> torch.Tensor:
        """_global_iteration with each architecture's clients stacked: same batch, messages and steps."""
        out = self.global_step_stacked(self.stacks(), self.shared_public_batch())
        for message in self._sent:  # logged after the step, which reads no host counter (Wire.log)
            self.wire.log(*message)
        self.iteration += 1
        return out

    def global_step_stacked(self, stacks: list, xb: torch.Tensor) -> torch.Tensor:
        """One feature-distillation iteration of the stacked clients on the public batch `xb`; their mean loss, a
        0-dim device tensor read at the round's end. A device program with no host sync, which
        torch.compile(fullgraph=True) traces whole."""
        feats = [stack.call("features", xb, shared_input=True) for stack in stacks]
        sent = self._per_client(feats)
        uploads = [self.wire.carry(h.detach()) for _, h in sent]
        mean = self.server.respond(uploads)
        targets = [self.wire.carry(mean) for _ in self.clients]
        self._sent = [(c.name, "server", "features", uploads[n]) for n, (c, _) in enumerate(sent)]
        self._sent += [("server", c.name, "mean_features", targets[n]) for n, c in enumerate(self.clients)]
        losses = []
        for group, stack, h in zip(self._groups, stacks, feats):
            target = leave_one_out(targets[group.members[0]], h.detach(), self.num_clients)  # per client
            loss = self.proto_weight * (h - target).square().mean(dim=(-2, -1))
            stack.step(loss.sum())
            losses.append(loss.detach())
        return device_mean(losses)

    def _per_client(self, stacked: Sequence[torch.Tensor]) -> list[tuple]:
        """(client, its slice) in client order from one stacked tensor per architecture group."""
        out = [(self.clients[n], t[j]) for group, t in zip(self._groups, stacked) for j, n in enumerate(group.members)]
        return sorted(out, key=lambda pair: pair[0].cid)

    def _prototype_round(self) -> dict:
        """FedProto's Algorithm 1: local steps with the prototype regulariser, then the exchange."""
        if self.batched:
            return self._prototype_round_batched()
        k, d = self.prototypes.shape
        ce_losses, proto_losses, uploads = [], [], []
        for client in self.clients:
            sums = torch.zeros(k, d, device=self.prototypes.device)
            counts = torch.zeros(k, device=self.prototypes.device)
            for _ in range(self.cfg.tau):
                x, y = client.local_batch()
                h, f = client.model.forward_both(x)
                ce = F.cross_entropy(f, y)
                loss = ce
                mask = self.known[y]
                if mask.any():
                    reg = F.mse_loss(h[mask], self.prototypes[y[mask]]) * mask.float().mean()
                    loss = loss + self.proto_weight * reg
                    proto_losses.append(reg.detach())
                client.step(loss)
                ce_losses.append(ce.detach())
                sums.index_add_(0, y, h.detach())
                counts += torch.bincount(y, minlength=k).to(counts.dtype)
            local = sums / counts.clamp_min(1)[:, None]  # C_n^(j), eq. (2); zero for labels it has not seen
            uploads.append(self.wire.send(client.name, "server", "prototypes", {"prototypes": local, "counts": counts}))
        return self._exchange_prototypes(uploads, ce_losses, proto_losses)

    def _exchange_prototypes(self, uploads: list, ce_losses: list, proto_losses: list) -> dict:
        reply = self.server.respond(uploads)
        for client in self.clients:
            got = self.wire.send("server", client.name, "global_prototypes", reply)
        self.prototypes, self.known = got["prototypes"], got["known"].bool()
        self.iteration += self.cfg.tau
        return {"ce": mean_of(ce_losses), "proto_mse": mean_of(proto_losses)}

    def _prototype_round_batched(self) -> dict:
        """_prototype_round with each architecture's clients stacked: every client's batches from its own
        stream, its regulariser over its own labelled rows, its local prototypes from its own features."""
        k = self.prototypes.shape[0]
        ce_losses, proto_losses, local = [], [], []
        for group, stack in zip(self._groups, self.stacks()):
            sums = torch.zeros(len(group.members), *self.prototypes.shape, device=self.prototypes.device)
            counts = torch.zeros(len(group.members), k, device=self.prototypes.device)
            for _ in range(self.cfg.tau):
                x, y = group.batch(self.clients, self.cfg.batch_size)
                h, f = stack.call("forward_both", x)
                ce = cross_entropy(f, y)
                mask = self.known[y].to(h.dtype)  # (G, B): rows whose label has a global prototype
                # per client: F.mse_loss over its masked rows times their fraction of the batch (eq. (4))
                held = mask.sum(-1)
                sq = ((h - self.prototypes[y]).square().mean(-1) * mask).sum(-1)
                reg = sq / held.clamp_min(1) * (held / y.shape[-1])
                stack.step((ce + self.proto_weight * reg).sum())
                ce_losses.append(ce.detach())
                proto_losses.append(reg.detach()[held > 0])
                onehot = F.one_hot(y, k).to(h.dtype)
                sums += torch.einsum("gbk,gbd->gkd", onehot, h.detach())
                counts += onehot.sum(1)
            local += list(zip(group.members, sums / counts.clamp_min(1)[..., None], counts))  # eq. (2)
        uploads = [
            self.wire.send(self.clients[n].name, "server", "prototypes", {"prototypes": p, "counts": c})
            for n, p, c in sorted(local, key=lambda entry: entry[0])
        ]
        return self._exchange_prototypes(uploads, ce_losses, proto_losses)

    def summary(self) -> dict:
        variant = self.variant if self.uses_public else f"{self.variant} ({self.server.average})"
        return {**super().summary(), "fedproto_variant": variant}

    def extra_state(self) -> dict:
        return {"prototypes": self.prototypes, "known": self.known}

    def load_extra_state(self, state: dict) -> None:
        self.prototypes, self.known = state["prototypes"].clone(), state["known"].clone()


def build(data: FedData, pool: list, cfg: TrainConfig, seed: int, spec: dict) -> FedProto:
    return FedProto(
        data,
        pool,
        cfg,
        seed,
        proto_weight=float(spec.get("proto_weight", 1.0)),
        variant=spec.get("variant", "public_features"),
        prototype_average=spec.get("prototype_average", "unweighted"),
        batched=bool(spec.get("batched", data.test_x.device.type == "cuda")),
    )


def run_job(job) -> None:
    from fedrepro.algorithms.fedal.jobs import run

    run(job, build)
