"""The audit of SteFFLe's silo releases, DP-FERMI's central releases, Tran et al.'s PF-LD and Ling et al.'s FedFDP.

SteFFLe (`SteffleTrainer`), Tran et al. (`TranTrainer`) and Ling et al. (`FedFDPTrainer`): one vectorised
trainer per world holds every run (`_grid_runs`), and `_replay_with_canary` steps the attacker's noiseless
replicas of both worlds from the real run's state on the same batch; `_score` sums the Gaussian
log-likelihood ratios. SteFFLe and Tran flip one sensitive attribute (their unit); Ling adds/removes one
record (its unit), an outlier the initial model gets wrong, so that both its releases are on their clips.
"""

from __future__ import annotations

import math
import time

import numpy as np

from fedrepro.audit.common import Audited
from fedrepro.privacy import accountant


def steffle_world(cfg: dict, seed: int):
    """Two `FairData` that differ in the sensitive attribute of row 0 (silo 0): SteFFLe's privacy unit.

    Row 0 is an outlier (features times `canary_scale`, signed so that theta_0 predicts it positive, label 1), so
    its clipped gradients sit on their clips and its predictions saturate. The training groups are exactly balanced (P(S = s) = 1/2 without the canary): the
    sensitivities 2 sqrt(2/rho)/m of h_w and sqrt(2) of Tran's group sums assume both groups at the smallest
    frequency rho, which only balanced groups attain (with P_S = 0.35 / 0.65 a flip reaches 0.82 of h_w's)."""
    from fedrepro.algorithms.steffle.base import FairData, init_theta

    rng = np.random.default_rng(seed)
    n, d = int(cfg["num_train"]), 4
    s = np.concatenate([rng.permutation(np.arange(n) % 2), rng.integers(0, 2, 64)]).astype(np.int64)
    x = rng.normal(size=(n + 64, d)).astype(np.float32)
    x[:, 0] += 1.5 * s
    y = (rng.random(n + 64) < 1 / (1 + np.exp(-(1.2 * x[:, 0] + x[:, 1] - 0.5)))).astype(np.int64)
    x[0] *= float(cfg["canary_scale"])
    # the canary is predicted positive by theta_0 (so by every model near it), with label 1: its probability,
    # which the group sums carry, sits near 1
    theta0 = init_theta([seed], d + 1, 1)[0, 0].double().numpy()
    x[0] *= np.sign(theta0[:d] @ x[0] + theta0[d]) or 1.0
    y[0] = 1
    silos = np.array_split(np.arange(n), int(cfg["silos"]))
    worlds = {}
    for name, flip in (("out", 0), ("in", 1)):
        sw = s[:n].copy()
        sw[0] = (sw[0] + flip) % 2
        worlds[name] = FairData.from_arrays(x[:n], y[:n], sw, x[n:], y[n:], s[n:], silos)
    return worlds


def steffle_spec(cfg: dict) -> dict:
    train = {k: cfg[k] for k in ("batch", "epochs", "eta_theta", "eta_w", "clip", "radius")}
    train.update(eval_every=int(cfg["epochs"]), sampling="poisson", w_step="capped")
    return {
        "method": "steffle",
        "fairness": "dp",
        "epsilons": [float(cfg["eps"])],
        "lambdas": [float(cfg["lam"])],
        "train": train,
    }


def _capture_uploads(trainer, update: bool) -> list:
    """Keeps what the server receives each round (`received` of `_server_update`); applies it only if `update`."""
    seen = []
    original = trainer._server_update

    def capture(t, received):
        seen.append(received)
        if update:
            original(t, received)

    trainer._server_update = capture
    return seen


def _grid_runs(build, spec: dict, worlds: dict, runs: int, seed: int, setting: list, epsilons: list, silence):
    """Per world, a trainer of `build` holding `runs` runs as its seeds (one vectorised program), all with the
    schedule and initial theta of `seed`, each with its own noise (world "in" takes the next `runs` seeds); and a
    noiseless replica per world for the attacker (`silence` switches its noise off). Also the privacy record."""
    from fedrepro.algorithms.steffle.base import seed_generator

    real, shadow, record = {}, {}, None
    for i, (w, data) in enumerate(worlds.items()):
        shadow[w] = build(spec, data, [seed], setting, epsilons)[0]  # its theta_0 is `seed`'s
        trainer, ctx = build(spec, data, [seed + 1 + i * runs + r for r in range(runs)], setting, epsilons)
        trainer.gens["batches"] = [seed_generator(seed, "batches") for _ in range(runs)]
        trainer.theta = shadow[w].theta[:1].expand_as(trainer.theta).clone()
        real[w], record = trainer, record or ctx
        silence(shadow[w])
    return real, shadow, record


def _trainer_state(trainer) -> dict:
    """What the attacker knows of a trainer before a step: theta, the epoch and the method's state (all
    computed from earlier releases)."""
    extra = {k: v.clone() if hasattr(v, "clone") else v for k, v in trainer.extra_state().items()}
    return {"theta": trainer.theta.clone(), "epoch": trainer.epoch, "extra": extra}


def _load_state(trainer, state: dict) -> None:
    trainer.theta, trainer.epoch = state["theta"], state["epoch"]
    trainer.load_extra_state(dict(state["extra"]))


def _replay_with_canary(trainer, shadow: dict, released, sigmas) -> list:
    """Trains `trainer` (one world, `runs` runs); before each of its steps the noiseless replicas of both worlds
    take its state and take the same step on the same batch. `released(tr, before)`: the step's releases of the
    canary's silo, (S, ...) tensors, read from trainer `tr` after the step (`before`: its state before). Returns
    per step the list of (observed, clean without the canary, clean with it, sigma), one per release."""
    import torch

    steps = []

    def step(t, local, weight, noise):
        before = _trainer_state(trainer)
        type(trainer).step(trainer, t, local, weight, noise)
        zero = {name: torch.zeros_like(value) for name, value in noise.items()}
        for sh in shadow.values():
            _load_state(sh, before)
            type(sh).step(sh, t, local, weight, zero)
        seen, out, inn = (released(tr, before) for tr in (trainer, shadow["out"], shadow["in"]))
        steps.append(list(zip(seen, out, inn, sigmas)))

    trainer.step = step
    for t in range(1, trainer.cfg.epochs + 1):
        trainer.round(t)
    return steps


def _score(steps: list, runs: int):
    """Per run, the Gaussian log-likelihood ratio summed over every release of `steps`, the canary's squared
    GDP mu (the noiseless shift over sigma), and how many steps the canary changed."""
    import torch

    llr, gap2, changed = torch.zeros(runs, dtype=torch.float64), torch.zeros(runs, dtype=torch.float64), 0
    for releases in steps:
        moved = False
        for observed, clean_out, clean_in, sigma in releases:
            step_llr, step_gap = _gauss_llr(observed, clean_out, clean_in, sigma)
            llr, gap2, moved = llr + step_llr, gap2 + step_gap, moved or bool(step_gap.max() > 0)
        changed += moved
    return llr, gap2, changed


def _pooled(scored: dict) -> tuple[dict, int, float]:
    """Per world `_score`'s (llr, squared mu, steps changed) -> each world's scores, the canary's steps (the
    schedule is shared: the most any world saw changed) and the canary's attained GDP mu over both worlds."""
    scores = {w: llr.numpy() for w, (llr, _, _) in scored.items()}
    changed = max(k for _, _, k in scored.values())
    mu_attained = math.sqrt(float(np.mean(np.concatenate([gap2.numpy() for _, gap2, _ in scored.values()]))))
    return scores, changed, mu_attained


def _gauss_llr(observed, clean_out, clean_in, sigma):
    """Per run: sum of [(o - a)^2 - (o - b)^2] / (2 sigma^2) and the mean shift's squared length over sigma^2."""
    dims = tuple(range(1, observed.dim()))
    llr = (((observed - clean_out) ** 2 - (observed - clean_in) ** 2).sum(dims) / (2 * sigma**2)).double()
    return llr, (((clean_in - clean_out) ** 2).sum(dims) / sigma**2).double()


def steffle_scores(cfg: dict, runs: int, seed: int, central: bool = False) -> Audited:
    """Audit of SteFFLe's silo releases (Algorithm 1 line 9): `runs` runs per world of `SteffleTrainer`.

    The attacker is the server: per round it sees silo 0's h_theta and h_w (and g, which is the same in both
    worlds and reveals the batch, issue 27), knows theta and W (it computes them) and the batch, and replays
    the silo's noiseless releases in both worlds from its replicas. `central`: DP-FERMI, the same trainer at
    N = 1 on the centralised rows (as its pipeline job runs it), batch = every row (q = 1, like the silos')."""
    from fedrepro.algorithms.steffle import sgda
    from fedrepro.privacy import steffle as steffle_privacy

    start = time.time()
    if central:
        cfg = {**cfg, "silos": 1, "batch": int(cfg["num_train"])}
    worlds, spec = steffle_world(cfg, seed), steffle_spec(cfg)
    if central:
        worlds = {w: data.centralised() for w, data in worlds.items()}
    threat = steffle_privacy.THREAT_MODELS["dp_fermi" if central else "steffle"]

    def silence(trainer):
        trainer.sigma_theta, trainer.sigma_w = trainer.sigma_theta * 0, trainer.sigma_w * 0

    setting = [(spec["epsilons"][0], spec["lambdas"][0])]
    real, shadow, ctx = _grid_runs(sgda.build, spec, worlds, runs, seed, setting, spec["epsilons"], silence)
    # P_S, the normaliser of h_w, is public in the paper (Lemma B.1's sensitivity treats it so): both worlds
    # use the one without the canary, so that only the canary's own batches differ
    for trainer in (real["in"], shadow["in"]):
        trainer.inv_sqrt_p = real["out"].inv_sqrt_p
    noise = ctx["per_eps"][str(float(cfg["eps"]))]
    sig_t, sig_w = float(noise["sigma_theta"][0]), float(noise["sigma_w"][0])
    keep = real["out"].mask.bool()  # only the entries of W that exist (fermi.w_mask) carry noise
    uploads = {id(tr): _capture_uploads(tr, update=tr in real.values()) for tr in [*real.values(), *shadow.values()]}

    def released(tr, before):  # silo 0's h_theta and h_w of this round (Algorithm 1 line 9)
        h_theta, h_w = uploads[id(tr)][-1][0][1][:, 0], uploads[id(tr)][-1][0][2][:, 0]
        return h_theta, h_w[:, keep.expand(h_w.shape[1:])]

    # k: the rounds whose noiseless releases differ, the canary's
    scores, k, mu_att = _pooled(
        {w: _score(_replay_with_canary(tr, shadow, released, (sig_t, sig_w)), runs) for w, tr in real.items()}
    )
    m, rho_w = real["out"].m, ctx["rho_w"]
    joint = steffle_privacy.joint_multiplier(
        [sig_t, sig_w], steffle_privacy.steffle_sensitivities(cfg["clip"], rho_w, m)
    )
    eps_adv = accountant.epsilon(joint, k, ctx["delta"], 1.0, "pld")
    return Audited(
        mechanism="DP-FERMI central releases (SteffleTrainer, N = 1)"
        if central
        else "SteFFLe silo releases (SteffleTrainer, Algorithm 1)",
        unit=threat.unit,
        variant=f"lambda {cfg['lam']:g}, {len(worlds['out'].silos)} silos, canary in {k} of {real['out'].rounds} rounds",
        adversary=f"{threat.adversary}: h_theta, h_w of the canary's silo, theta and W, and the batch (g reveals it)",
        out=scores["out"],
        inn=scores["in"],
        delta=float(ctx["delta"]),
        eps_claimed=float(noise.get("realised_epsilon", math.nan)),
        claimed_for=f"{threat.adversary} without the batch (Poisson q = m/n~ per silo, theta and W joint: the "
        "paper's reading)",
        eps_adversary=eps_adv,
        eps_reference=math.nan,
        mu_attained=mu_att,
        sigma=sig_t,
        note=(
            f"sigma_theta {sig_t:.3g}, sigma_w {sig_w:.3g} (Theorem 3.3 at eps = {cfg['eps']:g}); joint multiplier "
            f"{joint:.3g} per round with the canary (2C/m and 2 sqrt(2/rho)/m, rho = {rho_w:.3g}); canary GDP mu "
            f"{mu_att:.3g} of {math.sqrt(k) / joint:.3g}; P_S public (both worlds normalise h_w by the P_S without "
            "the canary, as the paper's sensitivity assumes)"
        ),
        seconds=time.time() - start,
        extra={"canary_rounds": k, "joint_multiplier": joint},
    )


# ------------------------------------------------------------------------------ Tran et al. (PF-LD)


def _tran_runs(data: dict, cfg: dict, runs: int, seed: int):
    """`_grid_runs` of TranTrainer; the cell frequencies (public in PF-LD) are the world without the canary's."""
    from fedrepro.algorithms.steffle import tran2021

    spec = {
        "method": "tran2021",
        "fairness": "dp",
        "train": {
            "batch": int(cfg["batch"]),
            "epochs": int(cfg["epochs"]),
            "eta_theta": float(cfg["eta_theta"]),
            "eval_every": int(cfg["epochs"]),
            "clip_primal": float(cfg["clip"]),
        },
    }

    def silence(trainer):
        trainer.z_mult = trainer.z_mult * 0
        trainer.remember_iterate = lambda t: None  # a replica keeps no output iterate

    setting = [(float(cfg["eps"]), float(cfg["lam"]))]
    real, shadow, record = _grid_runs(tran2021.build, spec, data, runs, seed, setting, [cfg["eps"]], silence)
    for trainer in (real["in"], shadow["in"]):
        trainer.cell_counts, trainer.p_cell = real["out"].cell_counts, real["out"].p_cell
        trainer.p_stratum = real["out"].p_stratum
    return real, shadow, record


def _run_tran_world(trainer, shadow: dict, sigmas: tuple[float, float]) -> tuple[list, list]:
    """Trains `trainer` and keeps, per primal step and per dual release, the releases with their noiseless
    replays in both worlds (`_replay_with_canary`'s steps)."""
    dual = []

    def end_epoch():
        clean = []
        for sh in shadow.values():
            sh.theta = trainer.theta
            clean.append(type(sh).dual_release(sh)[0][:, 0])
        original = trainer.dual_release

        def released():
            sums, noisy = original()
            dual.append([(noisy[:, 0], *clean, sigmas[1])])
            return sums, noisy

        trainer.dual_release = released
        type(trainer).end_epoch(trainer)
        trainer.dual_release = original

    def primal(tr, before):  # the noisy primal step, read off theta (the model iterates are released)
        lr = trainer.lr()
        return [((before["theta"] - tr.theta) / lr)[:, 0]]

    trainer.end_epoch = end_epoch
    return _replay_with_canary(trainer, shadow, primal, (sigmas[0],)), dual


def tran_scores(cfg: dict, runs: int, seed: int) -> Audited:
    """Audit of PF-LD (central DP of the sensitive attribute): every noisy primal step (read off theta) and every
    noisy dual release, which the attacker (the curator's observer: it knows the batches, theta, the multipliers)
    replays in both worlds."""

    from fedrepro.privacy import steffle as steffle_privacy

    start = time.time()
    data = {w: d.centralised() for w, d in steffle_world({**cfg, "silos": 1}, seed).items()}
    real, shadow, ctx = _tran_runs(data, cfg, runs, seed)
    record = ctx["per_eps"][str(cfg["eps"])]
    z, m = float(real["out"].z_mult[0]), real["out"].m
    sens_primal, sens_dual = steffle_privacy.fair_baseline_sensitivities(float(cfg["clip"]))
    sigma_primal, sigma_dual = z * sens_primal / m, z * sens_dual
    scored = {}
    for w, trainer in real.items():
        primal, dual = _run_tran_world(trainer, shadow, (sigma_primal, sigma_dual))
        (llr, gap2, k), (dual_llr, dual_gap2, _) = _score(primal, runs), _score(dual, runs)
        scored[w] = (llr + dual_llr, gap2 + dual_gap2, k)  # k: the primal steps the canary changed
    scores, k, mu_att = _pooled(scored)
    epochs = int(cfg["epochs"])
    # known batch: the k primal steps with the canary and every dual release, unamplified, multiplier z each
    eps_adv = accountant.epsilon(z, k + epochs, ctx["delta"], 1.0, "pld")
    return Audited(
        mechanism="Tran et al. 2021 PF-LD (TranTrainer)",
        unit=steffle_privacy.THREAT_MODELS["tran2021"].unit,
        variant=f"lambda {cfg['lam']:g}, canary in {k} of {real['out'].rounds} primal steps, {epochs} dual releases",
        adversary="an observer of every noisy primal step and dual release who knows the batches and the model",
        out=scores["out"],
        inn=scores["in"],
        delta=float(ctx["delta"]),
        eps_claimed=float(record.get("realised_epsilon", math.nan)),
        claimed_for="one who does not know the batch (Poisson q = m/n primal + q = 1 dual: the paper's reading)",
        eps_adversary=eps_adv,
        eps_reference=math.nan,
        mu_attained=mu_att,
        sigma=sigma_primal,
        note=(
            f"multiplier z = {z:.3g} for both steps (primal sensitivity 2 C_p/m, dual sqrt(2)); canary GDP mu "
            f"{mu_att:.3g} of {math.sqrt(k + epochs) / z:.3g}; the unclipped loss gradient is the same in both worlds "
            "(x, y public) so it cancels against this attacker; cell frequencies public (the world without the "
            "canary's)"
        ),
        seconds=time.time() - start,
        extra={"canary_rounds": k, "noise_multiplier": z},
    )


# ------------------------------------------------------------------------------ Ling et al. (FedFDP)


class _SiloTap:
    """Stands in for a trainer's wire: passes messages on and keeps what silo 0 sends the server, per round."""

    def __init__(self, wire):
        self.wire, self.sent = wire, []

    def send(self, sender, receiver, kind, payload):
        out = self.wire.send(sender, receiver, kind, payload)
        if sender == "silo0":
            self.sent.append(out)
        return out

    def __getattr__(self, name):
        return getattr(self.wire, name)


def _drop_canary(trainer) -> None:
    """World "out" of an add/remove audit: the same data and batches, with the canary (row 0, silo 0's first
    row) removed from every batch. The other rows' Poisson draws do not depend on it, so this is the data set
    without the record, on the schedule the attacker knows."""

    class WithoutCanary(type(trainer)):
        def step(self, t, local, weight, noise):
            weight = weight.clone()
            weight[:, 0] = weight[:, 0] * (local[:, 0] != 0)
            super().step(t, local, weight, noise)

    trainer.__class__ = WithoutCanary


def ling_world(cfg: dict, seed: int):
    """SteFFLe's audit data (`steffle_world`, its world "out"), row 0 an outlier whose label theta_0 gets wrong:
    its reweighted gradient and its loss both sit on their clips (C and B_t) in the canary's rounds."""
    import dataclasses

    from fedrepro.algorithms.steffle.base import init_theta

    data = steffle_world(cfg, seed)["out"]
    y = data.y.clone()
    y[0] = int(float(init_theta([seed], data.x.shape[1], 1)[0, 0] @ data.x[0]) < 0)
    return dataclasses.replace(data, y=y)


def ling_spec(cfg: dict) -> dict:
    keys = ("batch", "epochs", "eta_theta", "dp_norm", "clip_norm_for_loss")
    return {
        "method": "ling2024",
        "fairness": "dp",
        "train": {**{k: cfg[k] for k in keys}, "eval_every": int(cfg["epochs"]), "sampling": "poisson"},
    }


def ling_scores(cfg: dict, runs: int, seed: int) -> Audited:
    """Audit of FedFDP (record-level DP per client, add/remove): `runs` runs per world of `FedFDPTrainer`.

    The attacker is the server: per round it sees silo 0's noisy model update and noisy loss statistic, knows
    theta, the global loss L and the loss clip B_t (all computed from earlier releases), and the batch (a
    stronger attacker than the paper's, whose batch stays secret), and replays both worlds from its replicas."""
    from fedrepro.algorithms.steffle import ling2024
    from fedrepro.privacy import steffle as steffle_privacy

    start = time.time()
    data, spec = ling_world(cfg, seed), ling_spec(cfg)
    setting = [(float(cfg["eps"]), float(cfg["lam"]))]

    def silence(trainer):
        trainer.z_mult = trainer.z_mult * 0
        trainer.remember_iterate = lambda t: None

    worlds = {"out": data, "in": data}
    real, shadow, ctx = _grid_runs(ling2024.build, spec, worlds, runs, seed, setting, [cfg["eps"]], silence)
    for trainer in (real["out"], shadow["out"]):
        _drop_canary(trainer)
    for trainer in [*real.values(), *shadow.values()]:
        trainer.wire = _SiloTap(trainer.wire)
    record = ctx["per_eps"][str(cfg["eps"])]
    z, m, clip = float(real["out"].z_mult[0]), real["out"].m, float(cfg["dp_norm"])

    def released(tr, before):  # silo 0's update and loss statistic, each over its noise std (z C/m, z B_t/m)
        update, loss = tr.wire.sent[-2][:, 0], tr.wire.sent[-1][:, 0]
        # B_t = 0 (a released loss <= 0): the statistic is exactly 0 in both worlds and carries nothing
        loss_std = (z * before["extra"]["loss_clip"][:, 0, 0] / m).clamp_min(1e-30)
        return update / (z * clip / m), (loss / loss_std)[:, None]

    scores, k, mu_att = _pooled(
        {w: _score(_replay_with_canary(tr, shadow, released, (1.0, 1.0)), runs) for w, tr in real.items()}
    )
    joint = z / math.sqrt(2.0)  # both releases of a round, each multiplier z: one Gaussian of z / sqrt(2)
    eps_adv = accountant.epsilon(joint, k, ctx["delta"], 1.0, "pld")
    return Audited(
        mechanism="Ling et al. 2024 FedFDP (FedFDPTrainer)",
        unit=steffle_privacy.THREAT_MODELS["ling2024"].unit,
        variant=f"lambda {cfg['lam']:g}, {len(data.silos)} silos, canary in {k} of {real['out'].rounds} rounds",
        adversary="the server: silo 0's noisy update and loss statistic, theta, L, B_t, and the batch",
        out=scores["out"],
        inn=scores["in"],
        delta=float(ctx["delta"]),
        eps_claimed=float(record.get("realised_epsilon", math.nan)),
        claimed_for="the server without the batch (Poisson q = m/n_j, both releases jointly: the paper's reading, "
        "which holds here: FedFDP sends nothing in clear that reveals the batch)",
        eps_adversary=eps_adv,
        eps_reference=math.nan,
        mu_attained=mu_att,
        sigma=z * clip / m,
        note=(
            f"multiplier z = {z:.3g} for both releases (sensitivities C/m and B_t/m, add/remove); joint "
            f"{joint:.3g} per round with the canary; canary GDP mu {mu_att:.3g} of {math.sqrt(k) / joint:.3g}; "
            "canary: an outlier record theta_0 mispredicts, removed from every batch in the world without it"
        ),
        seconds=time.time() - start,
        extra={"canary_rounds": k, "noise_multiplier": z},
    )
