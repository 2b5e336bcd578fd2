"""FedAL and its ablations FedMD-LF and FedMD (paper Algorithm 1, eqs. (13)-(19)).

One class, two switches (the ablations of Table VIII):

========= ====== ====== ==============================================
method    use_lf use_al local stage / global stage
========= ====== ====== ==============================================
fedal     yes    yes    CE + r_loc  /  KL(p_bar_-n||p_n) + U_n + r_glo
fedmd_lf  yes    no     CE + r_loc  /  KL(p_bar_-n||p_n) + r_glo
fedmd     no     no     CE          /  KL(p_bar_-n||p_n)
========= ====== ====== ==============================================

A round: tau local steps per client on private batches (anchor: the model at
the start of the round), then tau global-transfer iterations on public batches
shared by all clients (anchor: the model at the end of the local stage). In each
global iteration every client uploads its logits (K*B floats) through the wire;
the server (`LogitServer`) replies with the average logits and, for FedAL,
dU_n/df_n (2*K*B floats down); the client applies the adversarial term through
the split gradient (19) without ever holding the discriminator.

Where the paper is silent, the choices are documented in kd.py, server.py, client.py
and base.py; clients minimise U_n as written in (7) (saturating form). FedMD-LF's tau is
not in the paper; the configs use 5 like FedAL (key `tau` of the method).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from fedrepro.algorithms.fedal.base import FedData, Federation, TrainConfig, device_mean, mean_of
from fedrepro.algorithms.fedal.client import Client, cross_entropy, frozen_logits
from fedrepro.algorithms.fedal.kd import kl_to_logits, leave_one_out, less_forgetting, surrogate_from_grad
from fedrepro.algorithms.fedal.server import AdversarialConfig, AdversarialHelper, LogitServer, adversarial_config
from fedrepro.fl.batched import Stack


def local_loss(client: Client, anchor, cfg: TrainConfig, anchor_is_live: bool = False) -> tuple:
    """V_n^loc (15): CE + r_loc (when `anchor` is given) on one private batch; (loss, parts).
    `anchor_is_live`: the anchor still equals the live model (the stage's first step), so its logits
    are the live logits, detached, and its forward pass is skipped."""
    x, y = client.local_batch()
    f = client.model(x)
    anchor_f = None
    if anchor is not None:
        anchor_f = f.detach() if anchor_is_live else frozen_logits(anchor, x)
    return local_terms(f, y, anchor_f, cfg)


def local_terms(f, y, anchor_logits, cfg: TrainConfig) -> tuple:
    """V_n^loc (15) from logits: CE + r_loc (if anchor logits are given); per client for stacked logits."""
    ce = cross_entropy(f, y)
    loss, parts = ce, {"ce": ce.detach()}
    if anchor_logits is not None:
        r = less_forgetting(anchor_logits, f, cfg.lf_temperature)
        loss = loss + cfg.weights["lf"] * r
        parts["r_loc"] = r.detach()
    return loss, parts


def global_loss(f, reply: Mapping, num_clients: int, cfg: TrainConfig, anchor_logits=None):
    """V_n^glo (17) from the client's live logits and the server's reply.

    KL to the leave-one-out average (`kd_target: all` keeps the all-client mean)
    + split-gradient surrogate of U_n (if the reply carries dU_n/df_n) + r_glo
    (if an anchor is given); weights `cfg.weights`. Logits stacked over a group of clients (G, B, K),
    with the reply's `grad_u` stacked alike, give one loss per client (G,).
    """
    target = reply["mean_logits"]
    if cfg.kd_target == "leave_one_out":
        target = leave_one_out(target, f.detach(), num_clients)
    kd = kl_to_logits(target, f, cfg.kd_temperature)
    w = cfg.weights
    loss, parts = w["kd"] * kd, {"kd": kd.detach()}
    if "grad_u" in reply:
        loss = loss + w["al"] * surrogate_from_grad(f, reply["grad_u"])
    if anchor_logits is not None:
        r = less_forgetting(anchor_logits, f, cfg.lf_temperature)
        loss = loss + w["lf"] * r
        parts["r_glo"] = r.detach()
    return loss, parts


class FedAL(Federation):
    """FedAL (use_al, use_lf), FedMD-LF (use_lf) or FedMD (neither).

    At a stage's first step the LF anchor (the model at the stage's start) is the live model: same
    weights, same BatchNorm mode and statistics, same batch, so r's anchor logits are the live
    logits detached (`share_first_anchor`; False runs the anchor's forward, for the tests).

    `batched`: the clients of one architecture run each step as one program (`fl.batched.Stack`:
    stacked parameters, BatchNorm statistics and Adam state, `vmap` forward, one backward of the
    summed losses), the same data streams, losses and updates as the per-client loop (`batched=False`,
    the reference the tests compare it with). The stacks are the clients' state while they train
    and are copied into the client models and Adams whenever those are read (evaluation, checkpoint).
    """

    share_first_anchor = True

    def __init__(
        self,
        data: FedData,
        pool: Sequence[Mapping],
        cfg: TrainConfig,
        seed: int,
        use_al: bool = True,
        use_lf: bool = True,
        adversarial: AdversarialConfig | None = None,
        assignment: Sequence[int] | None = None,
        batched: bool = False,
    ):
        super().__init__(data, pool, cfg, seed, assignment, batched)
        self.use_al, self.use_lf = use_al, use_lf
        adversary = None
        if use_al:
            a = adversarial or AdversarialConfig()
            adversary = AdversarialHelper(
                data.num_classes,
                self.num_clients,
                a.hidden,
                a.lr,
                a.optimizer,
                a.temperature,
                device=data.test_x.device,
                form=a.form,
                update=a.update,
            )
        self.server = LogitServer(self.num_clients, adversary)
        self.diag_every, self.diag_batches = 0, 0
        self._anchors0: dict = {}
        self._anchors_live = False

    def enable_diagnostics(self, every_rounds: int, batches: int) -> None:
        """Log Fig. 6's gradient variances every `every_rounds` rounds (see diagnostics.py)."""
        if every_rounds < 1 or batches < 2:
            raise ValueError(f"diagnostics need every_rounds >= 1 and batches >= 2, got {every_rounds} and {batches}")
        self.diag_every, self.diag_batches = every_rounds, batches

    # ------------------------------------------------------------------ stages
    def local_stage(self) -> dict:
        if self.batched:
            return self._local_stage_batched()
        parts: dict[str, list[float]] = {}
        for client in self.clients:
            anchor = client.snapshot("loc") if self.use_lf else None
            if client.cid == 0:
                self._anchors0["loc"] = anchor
            if self.cfg.adam_state == "per_stage":
                client.reset_optimizer()
            for i in range(self.cfg.tau):
                loss, p = local_loss(client, anchor, self.cfg, anchor_is_live=i == 0 and self.share_first_anchor)
                client.step(loss)
                for k, v in p.items():
                    parts.setdefault(k, []).append(v)
        return {k: mean_of(v) for k, v in parts.items()}

    def global_iteration(self, anchors) -> dict:
        """One global-transfer iteration (Algorithm 1 lines 13-26). At the stage's first
        (`_anchors_live`, set by global_stage) the anchors still equal the live models (class docstring)."""
        live, self._anchors_live = self._anchors_live and self.share_first_anchor, False
        batches = [c.public_batch() for c in self.clients]
        logits, uploads = [], []
        for client, (_, xb) in zip(self.clients, batches):
            f = client.model(xb)
            logits.append(f)
            uploads.append(self.wire.send(client.name, "server", "logits", f.detach()))
        replies = self.server.respond(uploads)
        parts: dict[str, list[float]] = {}
        for n, client in enumerate(self.clients):
            reply = self.wire.send("server", client.name, "reply", replies[n])
            anchor_logits = None
            if self.use_lf:
                anchor_logits = logits[n].detach() if live else frozen_logits(anchors[n], batches[n][1])
            loss, p = global_loss(logits[n], reply, self.num_clients, self.cfg, anchor_logits)
            client.step(loss)
            for k, v in p.items():
                parts.setdefault(k, []).append(v)
        self.iteration += 1
        return {k: mean_of(v) for k, v in parts.items()}

    def global_stage(self) -> dict:
        if self.batched:
            return self._global_stage_batched()
        anchors = [c.snapshot("glo") for c in self.clients] if self.use_lf else [None] * self.num_clients
        self._anchors0["glo"] = anchors[0]
        if self.cfg.adam_state == "per_stage":
            for client in self.clients:
                client.reset_optimizer()
        parts: dict[str, list[float]] = {}
        self._anchors_live = True
        for _ in range(self.cfg.tau):
            for k, v in self.global_iteration(anchors).items():
                parts.setdefault(k, []).append(v)
            if self.use_al:
                parts.setdefault("disc_loss", []).append(self.server.last_disc_loss)
        return {k: mean_of(v) for k, v in parts.items()}

    def round(self, t: int) -> dict:
        self.wire.round = t
        return {**self.local_stage(), **self.global_stage()}

    # ------------------------------------------------------------------ batched stages
    def _start_stage(self, slot: str) -> list[Stack]:
        if self.diag_every:  # Fig. 6 reads client 0's anchors as modules
            self.sync_clients()
            self._anchors0[slot] = self.clients[0].snapshot(slot) if self.use_lf else None
        stacks = self.stacks()
        if self.cfg.adam_state == "per_stage":
            for stack in stacks:
                stack.reset_optimizer()
        return stacks

    def _local_stage_batched(self) -> dict:
        parts: dict[str, list] = {}
        for group, stack in zip(self._groups, self._start_stage("loc")):
            anchor = stack.freeze() if self.use_lf else None
            for i in range(self.cfg.tau):
                x, y = group.batch(self.clients, self.cfg.batch_size)
                for k, v in self.local_step_stacked(stack, x, y, anchor, first=i == 0).items():
                    parts.setdefault(k, []).append(v)
        return {k: mean_of(v) for k, v in parts.items()}

    def local_step_stacked(self, stack: Stack, x: torch.Tensor, y: torch.Tensor, anchor, first: bool) -> dict:
        """One local step of a group's stacked clients on their batches (x, y), the stage's `first` or not:
        a device program with no host sync (its loss parts stay on the device, read at the stage's end),
        which torch.compile(fullgraph=True) traces whole."""
        f = stack.forward(x)
        anchor_f = None
        if anchor is not None:
            live = first and self.share_first_anchor
            anchor_f = f.detach() if live else frozen_stack_logits(stack, x, anchor, shared_input=False)
        loss, parts = local_terms(f, y, anchor_f, self.cfg)
        stack.step(loss.sum())
        return parts

    def _global_stage_batched(self) -> dict:
        stacks = self._start_stage("glo")
        anchors = [s.freeze() if self.use_lf else None for s in stacks]
        parts: dict[str, list] = {}
        for i in range(self.cfg.tau):
            live = i == 0 and self.share_first_anchor
            for k, v in self._global_iteration_batched(stacks, anchors, live).items():
                parts.setdefault(k, []).append(v)
            if self.use_al:
                parts.setdefault("disc_loss", []).append(self.server.last_disc_loss)
        # each iteration's means read in one copy, then averaged on the host as the per-client loop does
        return {k: mean_of(v if k == "disc_loss" else torch.stack(v).tolist()) for k, v in parts.items()}

    def _global_iteration_batched(self, stacks: list[Stack], anchors: list, live: bool) -> dict:
        """global_iteration with each architecture group's clients stacked: same public batch (every
        client draws it from its own copy of the shared stream), same messages, same losses."""
        parts = self.global_step_stacked(stacks, anchors, live, self.shared_public_batch())
        for message in self._sent:  # logged after the step, which reads no host counter (Wire.log)
            self.wire.log(*message)
        self.iteration += 1
        return parts

    def global_step_stacked(self, stacks: list[Stack], anchors: list, live: bool, xb: torch.Tensor) -> dict:
        """One global-transfer iteration of the stacked clients on the public batch `xb`: a device program with
        no host sync (each part's mean over the clients stays a 0-dim tensor), which torch.compile(fullgraph=True)
        traces whole."""
        logits, per_client = self.stacked_logits(xb)
        uploads = [self.wire.carry(per_client[n].detach()) for n in range(len(self.clients))]
        replies = [self.wire.carry(reply) for reply in self.server.respond(uploads)]
        self._sent = [(c.name, "server", "logits", uploads[n]) for n, c in enumerate(self.clients)]
        self._sent += [("server", c.name, "reply", replies[n]) for n, c in enumerate(self.clients)]
        parts: dict[str, list] = {}
        for group, stack, f, anchor in zip(self._groups, stacks, logits, anchors):
            reply = {"mean_logits": replies[group.members[0]]["mean_logits"]}
            if "grad_u" in replies[0]:
                reply["grad_u"] = torch.stack([replies[n]["grad_u"] for n in group.members])
            anchor_logits = None
            if anchor is not None:
                anchor_logits = f.detach() if live else frozen_stack_logits(stack, xb, anchor, shared_input=True)
            loss, p = global_loss(f, reply, self.num_clients, self.cfg, anchor_logits)
            stack.step(loss.sum())
            for k, v in p.items():
                parts.setdefault(k, []).append(v)
        return {k: device_mean(v) for k, v in parts.items()}

    def evaluate(self, t: int) -> dict:
        metrics = super().evaluate(t)
        if self.diag_every and t % self.diag_every == 0:
            from fedrepro.algorithms.fedal.diagnostics import fedal_variances

            # the measurement's train-mode forwards must not move BatchNorm statistics
            buffers = [{k: b.clone() for k, b in c.model.named_buffers()} for c in self.clients]
            metrics.update(fedal_variances(self, self._anchors0, self.diag_batches, seed=self.seed + t))
            for c, saved in zip(self.clients, buffers):
                for k, b in c.model.named_buffers():
                    b.copy_(saved[k])
        return metrics

    def summary(self) -> dict:
        """Adds the discriminator's last loss beside log N: at log N the discriminator cannot
        tell the clients apart (Theorem IV.4) and the adversarial term is inert."""
        out = super().summary()
        if self.use_al:
            out["disc_loss_final"] = float(self.server.last_disc_loss)
            out["disc_log_n"] = math.log(self.num_clients)
            out.update(self.server.adversary.settings())
        return out

    # ------------------------------------------------------------------ state
    def extra_state(self) -> dict:
        return {"server": self.server.state_dict()}

    def load_extra_state(self, state: dict) -> None:
        self.server.load_state_dict(state["server"])


@torch.no_grad()
def frozen_stack_logits(stack: Stack, x: torch.Tensor, frozen, shared_input: bool) -> torch.Tensor:
    """Logits of frozen stacked snapshots (anchors), in training mode like `frozen_logits`."""
    return stack.forward(x, shared_input=shared_input, frozen=frozen)


# ---------------------------------------------------------------------- pipeline entry
SWITCHES = {"fedal": (True, True), "fedmd_lf": (False, True), "fedmd": (False, False)}


def build(data: FedData, pool: list, cfg: TrainConfig, seed: int, spec: dict) -> FedAL:
    """fedal reads `use_al` / `use_lf` from the spec (default on); the ablations fix them. `batched`
    trains each architecture's clients as one program, false runs the per-client loop; the default is
    batched on a GPU only: on the CPU the stacked program is slower (benchmarks/fl_speed.py part 3:
    vmap turns each convolution into a grouped one and BatchNorm's batching rule copies activations)."""
    method = spec["method"]
    use_al, use_lf = SWITCHES[method]
    if method == "fedal":
        use_al, use_lf = bool(spec.get("use_al", True)), bool(spec.get("use_lf", True))
    adversarial = None
    if use_al:
        adversarial = adversarial_config(spec)
    batched = bool(spec.get("batched", data.test_x.device.type == "cuda"))
    algo = FedAL(data, pool, cfg, seed, use_al=use_al, use_lf=use_lf, adversarial=adversarial, batched=batched)
    diag = spec.get("diagnostics")
    if diag:
        algo.enable_diagnostics(int(diag["every_rounds"]), int(diag["batches"]))
    return algo


def run_job(job) -> None:
    from fedrepro.algorithms.fedal.jobs import run

    run(job, build)
