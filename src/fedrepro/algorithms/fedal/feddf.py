"""FedDF (Lin et al. 2020) and FedDF-AL, the shareable-parameter setting (paper Fig. 10).

Per round (tau from the config; the paper uses 10 for FedDF and 15 for FedDF-AL):
1. every client loads its architecture group's model, takes tau local steps
   (cross-entropy, + r_loc when `use_lf`) and uploads its weights;
2. the server averages the weights within each architecture group (FedAvg,
   weighted by data size);
3. the server distils each group model for tau iterations on public batches
   toward the ensemble of all N uploaded client models: the average of their
   logits, each teacher in eval mode (FedDF's Algorithm 1), then KL at E_kd;
   a fresh Adam per round as in FedDF.

FedDF-AL adds, in step 3, the adversarial term of FedAL: a discriminator whose
players are the architecture groups reads the students' temperature-E_d
softmax outputs, takes one step per iteration, and each student adds U_g
through the same split gradient as FedAL's clients (+ r_glo anchored at the
averaged model when `use_lf`).

Choices (the paper describes FedDF-AL in one sentence, Sec. VI-A "Baselines"):
distillation is server-side (as in FedDF); discriminator players = architecture
groups (clients of one group hold identical models after averaging, so a
per-client discriminator would have nothing to separate); `use_lf` defaults to
false (FedDF + the AL component, the paper's wording for Fig. 10); one
iteration = one distillation step, tau per round. Needs at least two
architectures when `use_al`.

`batched` (spec key, default on a GPU): step 1 runs each architecture's clients as one program
(fedavg.local_updates_batched) with the per-client loop's batches, losses, updates and uploads, the
downlinks logged before the uplinks, and step 3's ensemble forwards each architecture's teachers as one
stacked eval-mode program. The server's students and their steps are unchanged: one model per
architecture, so there is no group of same-architecture students to stack.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence

import torch
from torch.func import functional_call, vmap

from fedrepro.algorithms.fedal.base import FedData, Federation, TrainConfig, mean_of
from fedrepro.algorithms.fedal.client import build_client_model, frozen_logits
from fedrepro.algorithms.fedal.fedavg import local_update, local_updates_batched, state_of
from fedrepro.algorithms.fedal.kd import kl_to_probs, less_forgetting, surrogate_from_grad, tempered_softmax
from fedrepro.algorithms.fedal.server import AdversarialConfig, AdversarialHelper, adversarial_config
from fedrepro.fl.aggregate import weighted_average
from fedrepro.fl.optim import Adam


class FedDF(Federation):
    def __init__(
        self,
        data: FedData,
        pool: Sequence[Mapping],
        cfg: TrainConfig,
        seed: int,
        use_al: bool = False,
        use_lf: bool = False,
        adversarial: AdversarialConfig | None = None,
        server_lr: float | None = None,
        assignment: Sequence[int] | None = None,
        batched: bool = False,
    ):
        super().__init__(data, pool, cfg, seed, assignment, batched)
        device = data.test_x.device
        self.groups = sorted(set(self.assignment))
        self.members = {g: [n for n, a in enumerate(self.assignment) if a == g] for g in self.groups}
        # one server-side model per group, initialised from its first member
        self.group_models = {g: build_client_model(self.pool[g], data.num_classes).to(device) for g in self.groups}
        for g, model in self.group_models.items():
            model.load_state_dict(self.clients[self.members[g][0]].model.state_dict())
        # server-side copies of the uploaded client models (the distillation teachers)
        self.teachers = [build_client_model(self.pool[a], data.num_classes).to(device) for a in self.assignment]
        self._teacher_stacks: list[dict] = []  # batched: each group's received models stacked, set every round
        self.use_al, self.use_lf = use_al, use_lf
        self.server_lr = server_lr or cfg.lr
        self.adversary = None
        self.last_disc_loss = float("nan")
        if use_al:
            if len(self.groups) < 2:
                raise ValueError(
                    "feddf_al needs at least two architectures in the pool "
                    "(the discriminator tells architecture groups apart)"
                )
            a = adversarial or AdversarialConfig()
            self.adversary = AdversarialHelper(
                data.num_classes,
                len(self.groups),
                a.hidden,
                a.lr,
                a.optimizer,
                a.temperature,
                device=device,
                form=a.form,
                update=a.update,
            )
        self.server_public = self.public_stream()

    def models(self) -> list[torch.nn.Module]:
        return [self.group_models[a] for a in self.assignment]

    def round(self, t: int) -> dict:
        self.wire.round = t
        losses = self._local_updates_batched() if self.batched else self._local_updates()
        for g in self.groups:
            states = [t.state_dict() for i, t in enumerate(self.teachers) if self.assignment[i] == g]
            sizes = [self.clients[n].num_samples for n in self.members[g]]
            self.group_models[g].load_state_dict(weighted_average(states, sizes))
        return {"ce": mean_of(losses), **self._distill()}

    def _local_updates(self) -> list[torch.Tensor]:
        """Step 1: each client trains from its group's model; its upload becomes its teacher copy."""
        losses = []
        for n, client in enumerate(self.clients):
            start = self.wire.send("server", client.name, "weights", state_of(self.group_models[self.assignment[n]]))
            losses += local_update(client, start, self.cfg.tau, self.use_lf)
            self.teachers[n].load_state_dict(self.wire.send(client.name, "server", "weights", state_of(client.model)))
        return losses

    def _local_updates_batched(self) -> list[torch.Tensor]:
        """_local_updates with each architecture's clients stacked (every downlink before the uplinks)."""
        starts = [
            self.wire.send("server", c.name, "weights", state_of(self.group_models[a]))
            for c, a in zip(self.clients, self.assignment)
        ]
        losses, states = local_updates_batched(self, starts, self.cfg.tau, self.use_lf)
        uploads = [self.wire.send(c.name, "server", "weights", s) for c, s in zip(self.clients, states)]
        for teacher, upload in zip(self.teachers, uploads):
            teacher.load_state_dict(upload)
        self._teacher_stacks = [
            {name: torch.stack([uploads[n][name] for n in group.members]) for name in uploads[group.members[0]]}
            for group in self._groups
        ]
        return losses

    @torch.no_grad()
    def ensemble_logits(self, xb: torch.Tensor) -> torch.Tensor:
        """FedDF's teacher (Lin et al. 2020, Algorithm 1 and Sec. 3): the average LOGITS of the
        N received client models, each evaluated in eval mode (BatchNorm running statistics)."""
        if self.batched:
            return self._ensemble_logits_batched(xb)
        out = []
        for teacher in self.teachers:
            teacher.eval()
            out.append(teacher(xb))
        return torch.stack(out).mean(0)

    def _ensemble_logits_batched(self, xb: torch.Tensor) -> torch.Tensor:
        """ensemble_logits with each architecture's received models stacked (eval mode: nothing moves)."""
        out = [None] * self.num_clients
        for group, tensors in zip(self._groups, self._teacher_stacks):
            template = self.teachers[group.members[0]].eval()
            logits = vmap(functional_call, in_dims=(None, 0, None))(template, tensors, (xb,))
            for j, n in enumerate(group.members):
                out[n] = logits[j]
        return torch.stack(out).mean(0)

    def _distill(self) -> dict:
        students = [self.group_models[g] for g in self.groups]
        opts = [Adam(s.parameters(), lr=self.server_lr) for s in students]
        anchors = [_frozen_copy(s) for s in students] if self.use_lf else None
        parts: dict[str, list] = {}
        for _ in range(self.cfg.tau):
            idx = torch.as_tensor(self.server_public.next(self.cfg.batch_size), device=self.data.public_x.device)
            xb = self.data.public_x[idx]
            teacher = tempered_softmax(self.ensemble_logits(xb), self.cfg.kd_temperature)
            logits = [s(xb) for s in students]
            grads = None
            if self.adversary is not None:
                stacked = torch.stack([f.detach() for f in logits])
                grads, disc_loss = self.adversary.step_and_grads(stacked)
                self.last_disc_loss = float(disc_loss)
                parts.setdefault("disc_loss", []).append(disc_loss)
            for g, (f, opt) in enumerate(zip(logits, opts)):
                w = self.cfg.weights
                kd = kl_to_probs(teacher, f, self.cfg.kd_temperature)
                parts.setdefault("kd", []).append(kd.detach())
                loss = w["kd"] * kd
                if grads is not None:
                    loss = loss + w["al"] * surrogate_from_grad(f, grads[g])
                if anchors is not None:
                    loss = loss + w["lf"] * less_forgetting(frozen_logits(anchors[g], xb), f, self.cfg.lf_temperature)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            self.iteration += 1
        return {k: mean_of(v) for k, v in parts.items()}

    def summary(self) -> dict:
        """FedDF-AL adds its discriminator's last loss beside log G (G architecture groups): at log G
        it cannot tell the groups apart (Theorem IV.4)."""
        out = super().summary()
        if self.adversary is not None:
            out["disc_loss_final"] = self.last_disc_loss
            out["disc_log_n"] = math.log(len(self.groups))
            out.update(self.adversary.settings())
        return out

    def extra_state(self) -> dict:
        return {
            "groups": {g: m.state_dict() for g, m in self.group_models.items()},
            "adversary": self.adversary.state_dict() if self.adversary else None,
            "last_disc_loss": self.last_disc_loss,
            "public": self.server_public.state_dict(),
        }

    def load_extra_state(self, state: dict) -> None:
        for g, s in state["groups"].items():
            self.group_models[g].load_state_dict(s)
        if self.adversary is not None:
            self.adversary.load_state_dict(state["adversary"])
        self.last_disc_loss = float(state.get("last_disc_loss", float("nan")))
        self.server_public.load_state_dict(state["public"])


def _frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    frozen = copy.deepcopy(model)
    for p in frozen.parameters():
        p.requires_grad_(False)
    return frozen


def build(data: FedData, pool: list, cfg: TrainConfig, seed: int, spec: dict) -> FedDF:
    """feddf, or feddf_al (AL on; `use_lf` from the spec, default off)."""
    use_al = spec["method"] == "feddf_al"
    adversarial = None
    if use_al:
        adversarial = adversarial_config(spec)
    return FedDF(
        data,
        pool,
        cfg,
        seed,
        use_al=use_al,
        use_lf=bool(spec.get("use_lf", False)),
        adversarial=adversarial,
        server_lr=spec.get("server_lr"),
        batched=bool(spec.get("batched", data.test_x.device.type == "cuda")),
    )


def run_job(job) -> None:
    from fedrepro.algorithms.fedal.jobs import run

    run(job, build)
