"""The empirical privacy audit as a pipeline job: each paper's private mechanism run through its own class.

For every mechanism the job runs a small world many times without ("out") and with ("in") one canary,
and an attacker who knows everything but the noise scores each run with the Gaussian log-likelihood
ratio of what it observes (it replays the run in both worlds, noise switched off, to get the noiseless
release of each step). `fedrepro.privacy.audit` turns the scores into a lower bound on epsilon and the
audit's power; `fedrepro.report.audit` writes the table. The settings are the `audit:` block of
config.yaml.

Every attacker here knows the schedule (who takes part when, which samples are in which batch), so the
epsilon it is compared with is the one for that adversary: the releases that held the canary, each a
full Gaussian, no subsampling amplification (`Audited.eps_adversary`). A label computed for another
adversary (DPZV's Poisson amplification at q = B/D) is printed beside it, never compared with it.

* FedSC: `FedSC` rounds (Algorithm 1) with DP-CalR (Algorithm 2: 5 passes x 2 augmented views, NormClip,
  i.i.d. noise), partial participation (sigma * p), the first sharing round uploading every client;
  the attacker is the server and sees every matrix the canary's client uploads. Local training is
  switched off (the clients return the weights they received), because FedSC sends the weights in
  clear: the paper's DP covers the matrices only, and trained weights would leak the canary outside them.
* DPZV: `DPZV` rounds (Algorithm 1) with one flipped training label. The attacker pools the clients
  (they chose the batches) and sees the scalars they receive; with `label_privacy: dp_head` it also
  sees the head's noisy gradient, the release the accounting composes with Delta.
* SteFFLe (`SteffleTrainer`), Tran et al. (`TranTrainer`) and Ling et al. (`FedFDPTrainer`): one vectorised
  trainer per world holds every run (`_grid_runs`), and `_replay_with_canary` steps the attacker's noiseless
  replicas of both worlds from the real run's state on the same batch; `_score` sums the Gaussian
  log-likelihood ratios. SteFFLe and Tran flip one sensitive attribute (their unit); Ling adds/removes one
  record (its unit), an outlier the initial model gets wrong, so that both its releases are on their clips.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field

import numpy as np

from fedrepro.privacy import accountant


@dataclass
class Audited:
    """One mechanism's audit scores and the epsilons they are compared with."""

    mechanism: str
    variant: str
    adversary: str  # who the attacker is and what it sees
    out: np.ndarray  # scores of the runs without the canary
    inn: np.ndarray  # with it
    delta: float
    eps_claimed: float  # the label the run carries
    claimed_for: str  # the adversary that label assumes
    eps_adversary: float  # against this audit's adversary (inf: no finite bound holds)
    eps_reference: float  # for a leaking mechanism: what the leak-free variant reaches against the same adversary
    mu_attained: float  # GDP mu of the canary as mounted (noiseless replay, root mean square over runs)
    sigma: float
    note: str
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)
    unit: str = ""  # the privacy unit the canary is (the mechanism's threat model)


def _rms(values) -> float:
    return float(np.sqrt(np.mean(np.square(values))))


# ------------------------------------------------------------------------------ FedSC


def fedsc_world(cfg: dict, seed: int):
    """Two `SSLData` that differ in one sample of client 0 (the canary pair the attacker chose), the spec and
    the attacker's initial weights."""
    import torch

    from fedrepro.algorithms.fedsc.base import SSLData, build_net, channel_stats

    rng = np.random.default_rng(seed)
    clients, local = int(cfg["clients"]), int(cfg["local_size"])
    n = clients * local
    proto = rng.integers(0, 256, size=(3, 1, 8, 8))
    x = np.clip(proto[rng.integers(0, 3, n)] + rng.normal(0, 40, (n, 1, 8, 8)), 0, 255).astype(np.uint8)
    spec = fedsc_spec(cfg)
    torch.manual_seed(seed)
    net = build_net(spec, 1)
    mean, std = channel_stats(x)
    a, b = _canary_pair(net, spec, x, mean, std, seed)  # crafts net's last layer too
    worlds = {}
    for name, image in (("out", a), ("in", b)):
        xw = x.copy()
        xw[0] = image
        xt = torch.from_numpy(xw)
        worlds[name] = SSLData(
            xt,
            torch.zeros(n, dtype=torch.long),
            xt[:8],
            torch.zeros(8, dtype=torch.long),
            [torch.arange(j * local, (j + 1) * local) for j in range(clients)],
            3,
            mean,
            std,
        )
    return worlds, spec, net.state_dict()


def fedsc_spec(cfg: dict) -> dict:
    return {
        "rounds": int(cfg["rounds"]),
        "participation": cfg["participation"],
        "encoder": {"name": "small_cnn", "kwargs": {"width": 4, "feature_dim": 16, "image_size": 8}},
        "projector": {"hidden": 16, "out": int(cfg["hidden"])},
        "mu": float(cfg["mu"]),
        "sharing": {"after": 0.0, "every": 1},
        "privacy": {"eps": float(cfg["eps"]), "delta": float(cfg["delta"]), "sens_factor": "sqrt2"},
        "dpcalr": {"passes": 5, "views_per_pass": 2},
        "record_messages": False,
        "knn": {"k": 1},
    }


def _mean_outer(net, images: np.ndarray, spec: dict, mean, std, seed: int, layer=None):
    """Mean over 32 augmented views of each image's clipped z z^T (flattened), or of `layer`'s output."""
    import torch

    from fedrepro.algorithms.fedsc.augment import AugmentConfig, augment
    from fedrepro.privacy.mechanisms import normclip

    cfg = AugmentConfig.from_spec(spec.get("augment"), mean, std)
    gen = torch.Generator().manual_seed(seed)
    batch, total = torch.from_numpy(images), 0.0
    with torch.no_grad():
        for _ in range(32):
            view = augment(batch, cfg, gen)
            if layer is not None:
                total = total + layer(view).double() / 32
                continue
            z = normclip(net(view), float(spec["mu"])).double()
            total = total + torch.einsum("ni,nj->nij", z, z).flatten(1) / 32
    return total


def _canary_pair(net, spec: dict, x: np.ndarray, mean, std, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The attacker's canary pair and weights. The pair: of constant images and the data's own, the two whose
    mean clipped z z^T over augmented views are farthest apart. The weights: the server (the attacker) sends
    theta^0 with a projector output layer that maps the pair's mean hidden features to orthogonal directions,
    so the pair's clipped representations are close to orthogonal, the worst case of the sqrt(2) mu/|D_j|
    sensitivity (DP must hold whatever weights the server sends)."""
    import torch

    levels = np.repeat(np.arange(0, 256, 15), 64).reshape(-1, 1, 8, 8).astype(np.uint8)
    images = np.concatenate([levels, x[:16]])
    outer = _mean_outer(net, images, spec, mean, std, seed)
    i, j = np.unravel_index(int(torch.argmax(torch.cdist(outer, outer))), (len(images), len(images)))
    pair = np.stack([images[i], images[j]])
    hidden = _mean_outer(net, pair, spec, mean, std, seed, layer=lambda v: net.projector[:2](net.backbone(v)))
    last = net.projector[2]
    target = torch.zeros(2, last.out_features, dtype=torch.float64)
    target[0, 0] = target[1, 1] = 10.0 * math.sqrt(float(spec["mu"]))  # far outside the clip radius
    with torch.no_grad():
        last.weight.copy_((target.T @ torch.linalg.pinv(hidden.T)).float())
        last.bias.zero_()
    return pair[0], pair[1]


def fedsc_scores(cfg: dict, runs: int, seed: int) -> Audited:
    """Audit of FedSC's matrices: `runs` runs of `FedSC` per world, scored on client 0's uploads."""
    import torch

    from fedrepro.algorithms.fedsc.augment import augment
    from fedrepro.algorithms.fedsc.fedsc import FedSC
    from fedrepro.privacy import fedsc as fedsc_privacy
    from fedrepro.privacy.fedsc import clipped_correlation

    start = time.time()
    worlds, spec, theta0 = fedsc_world(cfg, seed)
    base = {}
    for w, data in worlds.items():
        base[w] = FedSC(spec, data, seed)
        base[w].net.load_state_dict(theta0)  # the server's crafted theta^0, the same in both worlds
    sigma, mu = base["out"].sigma, float(cfg["mu"])
    scores, mu2, shares, residuals = {w: np.empty(runs) for w in worlds}, [], 0, []
    for w in worlds:
        for r in range(runs):
            algo = copy.deepcopy(base[w])
            algo.gen.manual_seed(seed + 1 + 2 * r + (w == "in"))
            algo.client_update = _frozen_update  # the weights cross in clear: see the module docstring
            uploads = _tap_uploads(algo, 0)
            for t in range(1, spec["rounds"] + 1):
                algo.round(t)
            llr, gap2 = 0.0, 0.0
            for state, release in uploads:
                clean = {}
                for v, data in worlds.items():
                    gen = torch.Generator().manual_seed(0)
                    gen.set_state(state)
                    clean[v] = clipped_correlation(
                        algo.work, data.client_x(0), lambda b, g=gen, c=algo.aug_cfg: augment(b, c, g), mu, 5, 2
                    ).double()
                release = release.double()
                residuals.append((release - clean[w]).flatten())
                llr += float(((release - clean["out"]) ** 2 - (release - clean["in"]) ** 2).sum()) / (2 * sigma**2)
                gap2 += float(((clean["in"] - clean["out"]) ** 2).sum()) / sigma**2
            scores[w][r], shares = llr, len(uploads)
            mu2.append(gap2)
    n0 = worlds["out"].sizes[0]
    sens = fedsc_privacy.RIGOROUS_SENS_FACTOR * mu / n0
    eps_adv = accountant.epsilon(sigma / sens, shares, float(cfg["delta"]), 1.0, "pld")
    p = base["out"].per_round / base["out"].num_clients
    return Audited(
        mechanism="FedSC DP-CalR (FedSC class, Algorithms 1-2)",
        unit=fedsc_privacy.THREAT_NOTE.removeprefix("ε: ").split(", against")[0],
        variant=f"participation {p:g} (sigma x p), {shares} shares of the canary's client",
        adversary="the server: every matrix the canary's client uploads, the schedule and the weights (frozen)",
        out=scores["out"],
        inn=scores["in"],
        delta=float(cfg["delta"]),
        eps_claimed=float(cfg["eps"]),
        claimed_for="the server (Prop. 6.6 at the planned shares, before sigma x p)",
        eps_adversary=eps_adv,
        eps_reference=math.nan,
        mu_attained=math.sqrt(np.mean(mu2)),
        sigma=sigma,
        note=(
            f"sigma = {sigma:.3g} (Prop. 6.6 for {fedsc_privacy_planned(spec)} planned shares, |D_j| = {n0}, "
            f"times p = {p:g}); the canary's client uploaded {shares} times; canary: the pair of images and "
            f"the initial weights the server chose (`_canary_pair`), attaining {math.sqrt(np.mean(mu2)) * sigma / sens / math.sqrt(shares):.2f}"
            " of the sqrt(2) mu/|D_j| sensitivity (root mean square over shares)"
        ),
        seconds=time.time() - start,
        extra={"shares": shares, "noise_std": float(torch.cat(residuals).std())},
    )


def fedsc_privacy_planned(spec: dict) -> int:
    from fedrepro.algorithms.fedsc.fedsc import planned_shares

    return planned_shares(spec["rounds"], spec["sharing"])


def _frozen_update(j, weights, t, lr):
    """A client update that returns the synchronised weights (local training switched off)."""
    return weights, 0.0


def _tap_uploads(algo, client: int) -> list:
    """Keeps (generator state before DP-CalR, release) of every matrix `client` uploads in `algo`."""
    uploads = []
    original = algo.client_correlation

    def tapped(j, weights):
        state = algo.gen.get_state()
        release = original(j, weights)
        if j == client:
            uploads.append((state, release))
        return release

    algo.client_correlation = tapped
    return uploads


# ------------------------------------------------------------------------------ DPZV


AUDIT_IMAGE = (1, 8, 8)  # tiny_vfl_data's images, cut into one row strip per client


def check(config: dict) -> list[str]:
    """The DPZV audit's sizes (`audit.dpzv`) against its data, so that the audit job does not fail on them:
    each client holds at least one row of the images; one batch fits in the training set."""
    cfg, rows = config["audit"]["dpzv"], AUDIT_IMAGE[1]
    if not any(level.get("dpzv", 0) for level in config["audit"]["runs"].values()):
        return []
    errors = []
    if cfg["clients"] > rows:
        errors.append(
            f"config key 'audit.dpzv.clients': {cfg['clients']}, but the audit's {rows}-row images are cut into one "
            f"row strip per client; allowed: 1 to {rows}"
        )
    if cfg["batch_size"] > cfg["num_train"]:
        errors.append(
            f"config key 'audit.dpzv.batch_size': {cfg['batch_size']}, more than audit.dpzv.num_train "
            f"({cfg['num_train']}) training samples; allowed: 1 to {cfg['num_train']}"
        )
    return errors


def tiny_vfl_data(num_train: int = 64, num_test: int = 16, num_classes: int = 3, clients: int = 2, seed: int = 0):
    """Class-dependent 1 x 8 x 8 images (AUDIT_IMAGE) split into row strips over ``clients`` (a learnable
    stand-in)."""
    from fedrepro.algorithms.dpzv.base import build_vfl_data
    from fedrepro.data.partition import vertical_partition

    rng = np.random.default_rng(seed)
    proto = rng.integers(0, 256, size=(num_classes, *AUDIT_IMAGE))
    y = rng.integers(0, num_classes, size=num_train + num_test)
    x = np.clip(proto[y] + rng.normal(0, 40, size=(len(y), *AUDIT_IMAGE)), 0, 255).astype(np.uint8)
    part = vertical_partition(AUDIT_IMAGE, "rows", clients)
    return build_vfl_data(
        x[:num_train],
        y[:num_train],
        x[num_train:],
        y[num_train:],
        part.features,
        part.feature_shapes,
        num_classes,
        "image",
        val="test",
    )


class _ScalarTap:
    """Stands in for the run's wire: passes messages on and keeps the scalars the clients receive."""

    def __init__(self, wire):
        self.wire = wire
        self.received: list[float] = []

    def send(self, sender, receiver, kind, payload):
        out = self.wire.send(sender, receiver, kind, payload)
        if receiver != "server":
            self.received.append(float(out))
        return out

    def __getattr__(self, name):
        return getattr(self.wire, name)


def _head_grads(algo) -> dict:
    """The head's gradient sum of the last round (dp_head writes sum/B into .grad)."""
    return {k: p.grad.detach().double() * algo.cfg.batch_size for k, p in algo.server.head.named_parameters()}


def _sync_head(src, dst) -> None:
    dst.server.head.load_state_dict(src.server.head.state_dict())
    dst.server.optimizer.load_state_dict(copy.deepcopy(src.server.optimizer.state_dict()))


def _quiet(algo):
    """A copy of `algo` that draws no noise (the attacker's noiseless replay)."""
    shadow = copy.deepcopy(algo)
    shadow.noise = dict(shadow.noise, sigma=0.0, noise_multiplier=0.0)
    return shadow


def _label_worlds(data, canary: int, canary_scale: float) -> dict:
    """The neighbouring training sets: the canary's features times `canary_scale` at every client, its label as
    is ("out") or moved to the next class ("in")."""
    from fedrepro.algorithms.dpzv.base import VFLData

    train = [x.clone() for x in data.train]
    for x in train:
        x[canary] *= canary_scale
    flipped = data.y_train.clone()
    flipped[canary] = (flipped[canary] + 1) % data.num_classes
    return {
        w: VFLData(train, y, data.val, data.y_val, data.test, data.y_test, data.num_classes)
        for w, y in (("out", data.y_train), ("in", flipped))
    }


def _replay_label_round(real, tap, shadow: dict, sigma: float, sigma_head: float | None):
    """One round of the real run and the attacker's noiseless replay of it in both worlds (`shadow`): the batch
    ids, the observed scalar, the noiseless scalar per world, the round's log-likelihood-ratio terms (in the order
    they are summed) and its squared GDP mu. `sigma_head` (dp_head runs, else None): the head's noise std."""
    if sigma_head is not None:
        for algo in shadow.values():
            _sync_head(real, algo)
    m = real.next_client()
    ids = real.clients[m].next_batch()
    real.exchange(m, ids)
    observed = tap.received[-1]
    clean, grads = {}, {}
    for v, algo in shadow.items():
        assert algo.next_client() == m
        assert np.array_equal(algo.clients[m].next_batch(), ids)
        payload, u = algo.client_query(algo.clients[m], ids)
        answer, _ = algo.server_answer(m, payload)
        algo.client_apply(algo.clients[m], u, observed)
        clean[v] = float(answer)
        if sigma_head is not None:
            grads[v] = _head_grads(algo)
    terms = [((observed - clean["out"]) ** 2 - (observed - clean["in"]) ** 2) / (2 * sigma**2)]
    gap2 = (clean["in"] - clean["out"]) ** 2 / sigma**2
    if sigma_head is not None:
        seen = _head_grads(real)
        for k in seen:
            a, b = grads["out"][k], grads["in"][k]
            terms.append(float(((seen[k] - a) ** 2 - (seen[k] - b) ** 2).sum()) / (2 * sigma_head**2))
            gap2 += float(((b - a) ** 2).sum()) / sigma_head**2
    return ids, observed, clean, terms, gap2


def _craft_head(base: dict, canary: int, spread: float = 1.0, far: float = 50.0) -> None:
    """The attacker's initial head, the same in both worlds (DP must hold for every data-independent initial
    state; FedSC's audit crafts the server's weights too). Every class but the canary's two labels (y, y') gets a
    fixed logit `far` below, and the two labels' logit difference d lies within +-`spread` on each input the
    canary can have (each client's slot zero or its initial model's embedding of the canary). With p_y + p_y' = 1
    the per-sample ZO differences of the two labels are -p_y' D and +p_y D (D: the finite difference of d), of
    opposite signs, so once both pass the clip C every canary round moves Delta by the full 2C/B; the head's
    clipped per-sample gradients (dp_head) are then exact negatives too (2 C_h)."""
    import itertools

    import torch

    algo = base["out"]
    y = int(algo.server.y[canary])
    labels = [y, (y + 1) % algo.data.num_classes]
    first, last = algo.server.head[0], algo.server.head[2]
    with torch.no_grad():
        slots = [c.model(c.x[canary : canary + 1])[0] for c in algo.clients]
        masks = itertools.product((False, True), repeat=len(slots))
        inputs = torch.stack([torch.cat([h * on for h, on in zip(slots, mask)]) for mask in masks])
        v = torch.relu(first(inputs)) @ (last.weight[labels[0]] - last.weight[labels[1]])
        rho = 2.0 * spread / max(float(v.max() - v.min()), 1e-12)
        kept = last.weight[labels] * rho
        last.weight.zero_()
        last.weight[labels] = kept
        last.bias.fill_(-far)
        last.bias[labels[0]] = -rho * float(v.max() + v.min()) / 2.0
        last.bias[labels[1]] = 0.0
    base["in"].server.head.load_state_dict(algo.server.head.state_dict())


def dpzv_label_scores(
    runs: int, settings, data=None, canary: int = 0, canary_scale: float = 1.0, seed: int = 0, noise_seed: int = 1000
) -> tuple[np.ndarray, np.ndarray, dict]:
    """Scores of ``runs`` tiny DPZV runs per world: canary label as is ("out") or flipped ("in").

    Everything but the server's noise is seeded by ``seed`` (model initialisation, schedule, batches,
    ZO directions), as the attacker is assumed to know it; run r of world w draws its noise from
    ``noise_seed + 2r + [w = in]``. Per round the attacker replays both worlds (DPZV's own
    client_query / server_answer / client_apply with the noise switched off, clients fed the observed
    scalars) and adds [(D - a_out)^2 - (D - a_in)^2] / (2 sigma^2); with `label_privacy: dp_head` the
    replicas take the real head before each round and the head's noisy gradient sum enters the same
    way (std s C_h per coordinate). Also returns the run's sigma, rounds, the rounds that held the
    canary, the largest noiseless difference between the worlds in rounds without it (the server-head
    leak), the canary's GDP mu per run (in its own rounds, and in all), and the measured std of observed
    minus noiseless scalar. ``canary_scale`` multiplies the canary's features at every client (an
    outlier: DP must hold for every pair of neighbouring data sets, and a large input lets one label
    move the head far).
    """
    from fedrepro.algorithms.dpzv.dpzv import DPZV

    worlds = _label_worlds(data if data is not None else tiny_vfl_data(), canary, canary_scale)
    base = {w: DPZV(d, settings, seed) for w, d in worlds.items()}
    _craft_head(base, canary)
    sigma = float(base["out"].noise["sigma"])
    if not sigma > 0:
        raise ValueError("the DPZV audit needs a private run (finite eps, sigma > 0)")
    dp_head = base["out"].label_privacy == "dp_head"
    sigma_head = base["out"].noise["noise_multiplier"] * base["out"].head_clip if dp_head else None
    replicas = {w: _quiet(algo) for w, algo in base.items()}
    scores = {w: np.empty(runs) for w in worlds}
    info = {
        "sigma": sigma,
        "rounds": base["out"].total_rounds,
        "canary_rounds": 0,
        "leak_max": 0.0,
        "privacy": base["out"].privacy(),
        "mu_canary": [],
        "mu_all": [],
    }
    residuals = []
    for w in worlds:
        for r in range(runs):
            real = copy.deepcopy(base[w])
            real.server.noise.manual_seed(noise_seed + 2 * r + (w == "in"))
            tap = _ScalarTap(real.wire)
            real.wire = tap
            shadow = {v: copy.deepcopy(replicas[v]) for v in worlds}
            llr, canary_rounds, mu2_canary, mu2_other = 0.0, 0, 0.0, 0.0
            for _ in range(real.total_rounds):
                ids, observed, clean, terms, gap2 = _replay_label_round(real, tap, shadow, sigma, sigma_head)
                for term in terms:
                    llr += term
                residuals.append(observed - clean[w])
                if canary in ids:
                    canary_rounds += 1
                    mu2_canary += gap2
                else:
                    mu2_other += gap2
                    info["leak_max"] = max(info["leak_max"], abs(clean["in"] - clean["out"]))
            scores[w][r] = llr
            info["canary_rounds"] = max(info["canary_rounds"], canary_rounds)
            info["mu_canary"].append(math.sqrt(mu2_canary))
            info["mu_all"].append(math.sqrt(mu2_canary + mu2_other))
    info["noise_std"] = float(np.std(residuals))
    info["noise_distinct"] = len(set(residuals)) / len(residuals)  # 1: a fresh draw every round
    return scores["out"], scores["in"], info


DPZV_VARIANTS = {
    "paper": "Algorithm 1 as printed: head trained by SGD on the raw labels (from the crafted head)",
    "frozen_head": "head frozen (lr_server 0): only the canary's rounds see its label",
    "dp_head": "label_privacy: dp_head (head by DP-SGD on the same batch, joint multiplier s/sqrt(5)) at a small "
    "step size (dp_head_lr_server; the releases, Delta and the head's noisy gradient, hold at every step size): the "
    "crafted head keeps the canary's prediction on its two labels, so both parts reach their full sensitivity "
    "(2C/B and 2 C_h)",
}


def dpzv_settings(cfg: dict, variant: str):
    from fedrepro.algorithms.dpzv.base import VFLSettings

    extra = {"clip": float(cfg["clip"])}
    lr_server = float(cfg["lr_server"])
    if variant == "frozen_head":
        lr_server = 0.0
    elif variant == "dp_head":
        lr_server = float(cfg["dp_head_lr_server"])
        extra.update(label_privacy="dp_head", server_update="sgd", head_clip=float(cfg["head_clip"]))
    elif variant != "paper":
        raise ValueError(f"DPZV audit variant {variant!r} unknown; allowed: {', '.join(DPZV_VARIANTS)}")
    return VFLSettings(
        batch_size=int(cfg["batch_size"]),
        epochs=int(cfg["epochs"]),
        client_model="vfl_mnist_cnn",
        client_kwargs={"pool": [2, 2], "width": 4},
        embed_dim=4,
        server_hidden=8,
        lr_client=float(cfg["lr_client"]),
        lr_server=lr_server,
        eps=float(cfg["eps"]),
        delta=float(cfg["delta"]),
        extra=extra,
    )


def dpzv_audits(cfg: dict, runs: int, seed: int) -> list[Audited]:
    from fedrepro.privacy import dpzv as dpzv_privacy

    data = tiny_vfl_data(int(cfg["num_train"]), clients=int(cfg["clients"]), seed=seed)
    rows = []
    for variant in cfg["variants"]:
        start = time.time()
        settings = dpzv_settings(cfg, variant)
        out, inn, info = dpzv_label_scores(
            runs, settings, data, canary=0, canary_scale=float(cfg["canary_scale"]), seed=seed
        )
        b, c, k = settings.batch_size, settings.extra["clip"], info["canary_rounds"]
        s = info["privacy"]["noise_multiplier"]
        poisson = accountant.tight_epsilon(
            dpzv_privacy.dpzv_mechanism(info["sigma"], c, b, data.num_train, info["rounds"]), settings.delta
        )
        # the attacker knows the batches: each of the canary's k rounds is a full Gaussian release
        known = accountant.epsilon(s, k, settings.delta, 1.0, "pld")
        joint = dpzv_privacy.dp_head_multipliers(s)[1]
        eps_adv = {
            "paper": math.inf,
            "frozen_head": known,
            "dp_head": accountant.epsilon(joint, k, settings.delta, 1.0, "pld"),
        }[variant]
        adversary = "the clients pooled: the batch ids (they chose them) and every Delta they receive"
        if variant == "dp_head":
            adversary += ", and the head's noisy gradient (the release composed with Delta)"
        rows.append(
            Audited(
                mechanism="DPZV label channel (DPZV class, Algorithm 1)",
                unit=dpzv_privacy.threat_model("dpzv", "dp_head" if variant == "dp_head" else "none").protects,
                variant=variant,
                adversary=adversary,
                out=out,
                inn=inn,
                delta=settings.delta,
                eps_claimed=float(cfg["eps"]),
                claimed_for=f"one who does not know the batch (Poisson q = B/D; tight PLD {poisson:.3g})",
                eps_adversary=eps_adv,
                eps_reference=known if variant == "paper" else math.nan,
                mu_attained=_rms(info["mu_all"]),  # every round the attacker scores (the paper's leak included)
                sigma=info["sigma"],
                note=(
                    f"{DPZV_VARIANTS[variant]}; T = {info['rounds']} rounds, canary in {k}; largest change of a "
                    f"round without the canary {info['leak_max']:.3g} (2C/B = {2 * c / b:.3g}); canary GDP mu "
                    f"{_rms(info['mu_canary']):.3g} in its own rounds, {_rms(info['mu_all']):.3g} in all; "
                    f"measured noise std {info['noise_std']:.3g} (sigma {info['sigma']:.3g})"
                ),
                seconds=time.time() - start,
                extra={"canary_rounds": k, "eps_poisson_pld": poisson, "mu_all": _rms(info["mu_all"])},
            )
        )
    return rows


# ------------------------------------------------------------------------------ DPZV's baselines


def _embedding_canary(algo, x, scale: float, seed: int):
    """Client 0's canary pair: two slices whose clipped initial embeddings are as far apart as the attacker finds
    (replace-one moves a row by at most 2 C_h): the farthest of 64 random slices times `scale` and their negatives,
    then 200 Adam steps on both slices that push their clipped embeddings apart."""
    import torch

    from fedrepro.privacy.mechanisms import clip_by_norm

    model, clip = copy.deepcopy(algo.clients[0].model), algo.embed_clip

    def clipped(v):
        return clip_by_norm(model(v), clip, dim=1)

    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn((64, *x.shape[1:]), generator=gen, dtype=x.dtype) * scale
    candidates = torch.cat([noise, -noise])
    with torch.no_grad():
        h = clipped(candidates)
    i, j = np.unravel_index(int(torch.argmax(torch.cdist(h, h))), (len(h), len(h)))
    pair = candidates[[i, j]].clone().requires_grad_(True)
    optimizer = torch.optim.Adam([pair], lr=0.05 * scale)
    for _ in range(200):
        optimizer.zero_grad()
        h = clipped(pair)
        (-(h[0] - h[1]).norm()).backward()
        optimizer.step()
    pair = pair.detach()
    return pair[0], pair[1]


def _clean_embeddings(algo, client, ids, answer) -> list:
    """The canary's client's noiseless, clipped release(s) of this round in one world (h, or ZOO-VFL's h and h'),
    and the client's update with the server's real `answer` (the attacker's replica)."""
    import torch

    from fedrepro.privacy.mechanisms import clip_by_norm

    x = client.x[algo.ids_tensor(ids)]
    if algo.method == "zoo_vfl":
        seed = client.new_seed()
        with torch.no_grad():
            twin = algo._perturbed_copy(client, client.model, seed)
            clean = [clip_by_norm(m(x), algo.embed_clip, dim=1).double() for m in (client.model, twin)]
        algo.client_apply(client, seed, float(answer))
        return clean
    h = clip_by_norm(client.model(x), algo.embed_clip, dim=1)
    algo.client_backward(client, h, answer)
    return [h.detach().double()]


def _embedding_worlds(data, pair) -> dict:
    """The neighbouring training sets: client 0's slice of sample 0 is the canary pair's one row ("out") or the
    other ("in")."""
    from fedrepro.algorithms.dpzv.base import VFLData

    worlds = {}
    for w, row in zip(("out", "in"), pair):
        train = [x.clone() for x in data.train]
        train[0][0] = row
        worlds[w] = VFLData(train, data.y_train, data.val, data.y_val, data.test, data.y_test, data.num_classes)
    return worlds


def _tap_client0(real) -> list:
    """Record every (message, answer) of client 0 that the server of `real` answers; returns the record."""
    seen = []
    answer_of = real.server_answer

    def tapped(m, msg):
        answer, stats = answer_of(m, msg)
        if m == 0:
            seen.append((msg, answer))
        return answer, stats

    real.server_answer = tapped
    return seen


def _replay_embedding_round(real, replica: dict, state, ids, seen: tuple, world: str, sigma: float, shared: bool):
    """Client 0's round (`seen`: its message and the server's answer) replayed in both worlds from the client's
    RNG `state`: the Gaussian log-likelihood-ratio term, the exact part's |d - d_out|^2 - |d - d_in|^2 (ZOO-VFL's
    shared draw, else 0), that part's squared residual and size in `world`, the noise observed, the squared mu."""
    msg, answer = seen
    clean = {}
    for v, client in replica.items():
        client.rng.bit_generator.state = copy.deepcopy(state)
        clean[v] = _clean_embeddings(real, client, ids, answer)
    observed = msg["h"].double()
    a, b = clean["out"][0], clean["in"][0]
    gauss = float(((observed - a) ** 2 - (observed - b) ** 2).sum()) / (2 * sigma**2)
    exact, residual2, size = 0.0, 0.0, 0
    if shared:
        d = msg["h_perturbed"].double() - observed
        d_out, d_in = clean["out"][1] - a, clean["in"][1] - b
        exact = float(((d - d_out) ** 2 - (d - d_in) ** 2).sum())
        own = d_out if world == "out" else d_in
        residual2, size = float(((d - own) ** 2).sum()), own.numel()
    gap2 = float(((b - a) ** 2).sum()) / sigma**2
    return gauss, exact, residual2, size, (observed - clean[world][0]).flatten(), gap2


def dpzv_embedding_scores(runs: int, method: str, settings, data, canary_scale: float, seed: int = 0):
    """Scores of `runs` runs per world of one DPZV baseline (VAFL, ZOO-VFL, VFL-CZOFO) whose client 0 holds the
    canary pair's one slice ("out") or the other ("in"). The attacker is the server: it sees every message, knows
    the schedule, the data but the canary and the clients' randomness but their noise, and replays client 0 in
    both worlds (its model and the server's real answers). Per round of client 0 the score adds the Gaussian
    log-likelihood ratio of the noisy embeddings (sigma_h per coordinate); ZOO-VFL's shared draw on (h, h') sends
    h' - h exactly, which enters as a Gaussian of the float rounding's std (`tau`, measured)."""
    import importlib

    import torch

    from fedrepro.algorithms.dpzv import METHODS

    cls = importlib.import_module(METHODS[method].entry.split(":")[0]).ALGORITHM
    pair = _embedding_canary(cls(data, settings, seed), data.train[0], canary_scale, seed)
    worlds = _embedding_worlds(data, pair)
    base = {w: cls(d, settings, seed) for w, d in worlds.items()}
    sigma = float(base["out"].noise["sigma"])
    shared = method == "zoo_vfl" and base["out"].noise_mode == "shared"
    sums = {w: np.zeros((runs, 2)) for w in worlds}  # Gaussian llr, exact part's |d - d_out|^2 - |d - d_in|^2
    mu2, info = {w: np.zeros((runs, 2)) for w in worlds}, {"first": None, "client_rounds": 0, "canary_rounds": 0}
    residual2, count, noise = 0.0, 0, []
    for w in worlds:
        for r in range(runs):
            real = copy.deepcopy(base[w])
            for m, client in enumerate(real.clients):
                client.noise.manual_seed(1000 + 4 * r + 2 * m + (w == "in"))
            seen = _tap_client0(real)
            replica = {v: copy.deepcopy(base[v].clients[0]) for v in worlds}
            client_rounds = canary_rounds = 0
            for _ in range(real.total_rounds):
                m = real.next_client()
                ids = real.clients[m].next_batch()
                state = copy.deepcopy(real.clients[m].rng.bit_generator.state)
                real.exchange(m, ids)
                if m != 0:
                    continue
                client_rounds += 1
                gauss, exact, res2, size, observed_noise, gap2 = _replay_embedding_round(
                    real, replica, state, ids, seen[-1], w, sigma, shared
                )
                sums[w][r, 0] += gauss
                sums[w][r, 1] += exact
                residual2, count = residual2 + res2, count + size
                noise.append(observed_noise)
                if 0 in ids:
                    canary_rounds += 1
                    info["first"] = info["first"] if info["first"] is not None else client_rounds
                mu2[w][r, 0 if 0 in ids else 1] += gap2
            info["client_rounds"], info["canary_rounds"] = client_rounds, canary_rounds
    tau = math.sqrt(residual2 / count) if count else math.nan
    if shared:
        tau = max(tau, 1e-12)
    scores = {w: s[:, 0] + (s[:, 1] / (2 * tau**2) if shared else 0.0) for w, s in sums.items()}
    both = np.concatenate(list(mu2.values()))
    info.update(
        sigma=sigma,
        tau=tau,
        privacy=base["out"].privacy(),
        mu_canary=float(np.sqrt(both[:, 0].mean())),
        noise_std=float(torch.cat(noise).std()),
        mu_all=float(np.sqrt(both.sum(1).mean())),
        rounds=base["out"].total_rounds,
    )
    return scores["out"], scores["in"], info


def dpzv_baseline_audits(cfg: dict, runs: int, seed: int) -> list[Audited]:
    """One row per baseline of `cfg['baselines']`: its noisy embeddings against the server (which sees the ids)."""
    import dataclasses

    from fedrepro.privacy import dpzv as dpzv_privacy

    data = tiny_vfl_data(int(cfg["num_train"]), clients=int(cfg["clients"]), seed=seed)
    rows = []
    for method in cfg["baselines"]:
        start = time.time()
        settings = dataclasses.replace(dpzv_settings(cfg, "paper"), extra={"embed_clip": float(cfg["embed_clip"])})
        out, inn, info = dpzv_embedding_scores(runs, method, settings, data, float(cfg["canary_scale"]), seed)
        z = float(info["privacy"]["noise_multiplier"])
        steps = int(info["privacy"]["releases"]) // info["rounds"]  # ZOO-VFL's pair counted separately: 2
        k, b = info["canary_rounds"], settings.batch_size
        fixed_model = dpzv_privacy.known_batch_epsilon(z, steps * k, settings.delta)
        after = info["client_rounds"] - info["first"] + 1  # client 0's rounds from the canary's first use on
        leak_bound = dpzv_privacy.trained_client_epsilon(z, b, after, settings.delta)
        eps_adv = math.inf if method == "zoo_vfl" else leak_bound
        record = info["privacy"]
        rows.append(
            Audited(
                mechanism=f"{dpzv_privacy.THREAT_MODELS[method].mechanism.split(' (')[0]} embeddings (DPZV baseline)",
                unit=dpzv_privacy.THREAT_MODELS[method].protects,
                variant=f"client 0's slice of one sample replaced; embed_clip {cfg['embed_clip']:g}",
                adversary="the server: the ids and every noisy embedding of the canary's client, the schedule, the "
                "clients' models replayed in both worlds",
                out=out,
                inn=inn,
                delta=settings.delta,
                eps_claimed=float(cfg["eps"]),
                claimed_for=f"one who does not know the batch (Poisson q = B/D; tight PLD {record['eps_pld']:.3g})",
                eps_adversary=eps_adv,
                eps_reference=fixed_model,
                mu_attained=info["mu_all"] if method != "zoo_vfl" else info["mu_canary"],
                sigma=info["sigma"],
                note=(
                    f"{dpzv_privacy.CLIENT_MODEL_LEAK[method]}; eps_reference: the known-batch bound for a fixed client model "
                    f"(sqrt({steps * k})/z, z = {z:.3g}; the privacy table's eps_known_one_client); eps_adversary: "
                    + (
                        "inf (h' - h crosses without noise)"
                        if method == "zoo_vfl"
                        else f"sqrt({after} B)/z over client 0's {after} rounds from the canary's first use"
                    )
                    + f"; canary GDP mu {info['mu_canary']:.3g} in its {k} rounds, {info['mu_all']:.3g} in all"
                    + (f"; float rounding tau {info['tau']:.2g}" if method == "zoo_vfl" else "")
                ),
                seconds=time.time() - start,
                extra={
                    "canary_rounds": k,
                    "rounds_after": after,
                    "noise_multiplier": z,
                    "tau": info["tau"],
                    "mu_canary": info["mu_canary"],
                    "mu_all": info["mu_all"],
                    "noise_std": info["noise_std"],
                },
            )
        )
    return rows


# ------------------------------------------------------------------------------ releases in clear


def _exact_scores(observed: list, clean: list, world_of_run: list) -> tuple[dict, float]:
    """Scores of noise-free releases: per run, (|o - c_out|^2 - |o - c_in|^2) / (2 tau^2) with c_out, c_in the
    attacker's replays of that run in both worlds (`clean`: one {"out", "in"} per run) and tau the measured
    residual of the observed releases around their own world's replay (float rounding; at least 1e-12). The
    attacker's test is then exact: the lower bound reaches the most the runs can show (Clopper-Pearson)."""
    residual = [float(((o - c[w]) ** 2).mean()) for o, c, w in zip(observed, clean, world_of_run)]
    tau = max(math.sqrt(float(np.mean(residual))), 1e-12)
    scores = {"out": [], "in": []}
    for o, c, w in zip(observed, clean, world_of_run):
        scores[w].append(float(((o - c["out"]) ** 2).sum() - ((o - c["in"]) ** 2).sum()) / (2 * tau**2))
    return {w: np.asarray(v) for w, v in scores.items()}, tau


def vfl_table_init_audit(cfg: dict, runs: int, seed: int) -> Audited:
    """The VFL baselines' `table_init: forward`: before round 1 every client uploads its initial model's clean
    embedding of every training record, which the server stores in its table. The attacker is the server; the
    canary is client 0's slice of one record (the baselines' pair, `_embedding_canary`); the score is the canary's
    row of the table. No noise touches it, so no finite epsilon holds; the leak-free variant (`table_init: zeros`,
    the default) uploads nothing before round 1 (eps_reference 0)."""
    import dataclasses
    import importlib

    from fedrepro.algorithms.dpzv import METHODS
    from fedrepro.privacy import dpzv as dpzv_privacy

    start = time.time()
    method = cfg["table_init_baseline"]
    cls = importlib.import_module(METHODS[method].entry.split(":")[0]).ALGORITHM
    data = tiny_vfl_data(int(cfg["num_train"]), clients=int(cfg["clients"]), seed=seed)
    settings = dataclasses.replace(
        dpzv_settings(cfg, "paper"), table_init="forward", extra={"embed_clip": float(cfg["embed_clip"])}
    )
    pair = _embedding_canary(cls(data, settings, seed), data.train[0], float(cfg["canary_scale"]), seed)
    worlds = _embedding_worlds(data, pair)
    base = {w: cls(d, settings, seed) for w, d in worlds.items()}
    clean = {w: algo.server.table[0, 0].double().clone() for w, algo in base.items()}  # the attacker's replay
    observed, world_of_run = [], []
    for w, algo in base.items():
        for r in range(runs):  # each run uploads afresh with its own noise seeds, which never reach the upload
            for m, client in enumerate(algo.clients):
                client.noise.manual_seed(1000 + 4 * r + 2 * m + (w == "in"))
            algo.server.table.zero_()
            algo._fill_table()
            observed.append(algo.server.table[0, 0].double().clone())
            world_of_run.append(w)
    scores, tau = _exact_scores(observed, [clean] * len(observed), world_of_run)
    record = algo.privacy()
    label = dpzv_privacy.THREAT_MODELS[method].mechanism.split(" (")[0]
    return Audited(
        mechanism=f"{label} table init (table_init: forward; DPZV baseline)",
        unit=dpzv_privacy.THREAT_MODELS[method].protects,
        variant="client 0's slice of one sample replaced; its initial embedding uploaded before round 1",
        adversary="the server: the table it fills from the clients' initial uploads",
        out=scores["out"],
        inn=scores["in"],
        delta=settings.delta,
        eps_claimed=float(cfg["eps"]),
        claimed_for=f"one who does not know the batch (Poisson q = B/D; tight PLD {record['eps_pld']:.3g})",
        eps_adversary=math.inf,
        eps_reference=0.0,
        mu_attained=math.inf,
        sigma=float(record["sigma"]),
        note=(
            f"{dpzv_privacy.FORWARD_TABLE}: a noise-free release, so no finite epsilon holds (the run's bound "
            f"against the server reads inf: {record['why_server']}); eps_reference 0: the default table_init zeros "
            f"uploads nothing before round 1; the canary's rows differ by "
            f"{float((clean['in'] - clean['out']).norm()):.3g}; float rounding tau {tau:.2g}"
        ),
        seconds=time.time() - start,
        extra={"tau": tau},
    )


def fedsc_weights_audit(cfg: dict, runs: int, seed: int) -> Audited:
    """FedSC's weights in clear: client 0's locally trained weights of round 1 (Algorithm 1 line 10), which the
    server receives without noise. The attacker is the server: it knows the weights it sent, the matrices it
    received and broadcast, and the client's augmentation draws (the generator's state), and replays client 0's
    local training in both worlds. The paper's DP covers the matrices only (the FedSC matrices row); the frozen
    variant (the client returns the weights it received) sends nothing of the canary here (eps_reference 0)."""
    from fedrepro.algorithms.fedsc.fedsc import FedSC
    from fedrepro.privacy import fedsc as fedsc_privacy

    start = time.time()
    worlds, spec, theta0 = fedsc_world(cfg, seed)
    base = {}
    for w, data in worlds.items():
        base[w] = FedSC(spec, data, seed)
        base[w].net.load_state_dict(theta0)
    observed, world_of_run, clean = [], [], []
    for w in worlds:
        for r in range(runs):
            algo = copy.deepcopy(base[w])
            algo.gen.manual_seed(seed + 1 + 2 * r + (w == "in"))
            seen = _tap_weights(algo, 0, worlds)
            algo.round(1)
            observed.append(seen["observed"])
            clean.append(seen["clean"])  # each run's replay: its augmentations are its own
            world_of_run.append(w)
    scores, tau = _exact_scores(observed, clean, world_of_run)
    gap = float(np.mean([float((c["in"] - c["out"]).norm()) for c in clean]))
    return Audited(
        mechanism="FedSC weights in clear (FedSC class, Algorithm 1 line 10)",
        unit=fedsc_privacy.THREAT_NOTE.removeprefix("ε: ").split(", against")[0],
        variant="client 0's round-1 weights after local training (the matrices row freezes them)",
        adversary="the server: the weights client 0 uploads, the weights and matrices it sent, the client's "
        "augmentation draws",
        out=scores["out"],
        inn=scores["in"],
        delta=float(cfg["delta"]),
        eps_claimed=float(cfg["eps"]),
        claimed_for="the server (Prop. 6.6 at the planned shares, for the matrices only)",
        eps_adversary=math.inf,
        eps_reference=0.0,
        mu_attained=math.inf,
        sigma=float(base["out"].sigma),
        note=(
            "the weights cross without noise after local SGD on the client's images, so no finite epsilon holds "
            "against the server (FedSC's DP covers the correlation matrices only); eps_reference 0: the frozen "
            f"variant returns the weights it received; the two worlds' replays differ by {gap:.3g} (L2, mean over "
            f"runs); float rounding tau {tau:.2g}"
        ),
        seconds=time.time() - start,
        extra={"tau": tau},
    )


def _tap_weights(algo, client: int, worlds: dict) -> dict:
    """Keeps what `client` uploads after its local training in round 1 and the attacker's replay of that
    training in both worlds (the same generator state, matrices and weights; only the data differ)."""
    import torch

    seen = {}
    original = algo.client_update

    def tapped(j, weights, t, lr):
        if j != client:
            return original(j, weights, t, lr)
        state = algo.gen.get_state()
        clean = {}
        for v, data in worlds.items():
            replica = copy.copy(algo)
            replica.work, replica.data = copy.deepcopy(algo.work), data
            replica.gen = torch.Generator().manual_seed(0)
            replica.gen.set_state(state)
            out, _ = type(algo).client_update(replica, j, weights, t, lr)
            clean[v] = torch.cat([p.double().flatten() for p in out.values()])
        out, loss = original(j, weights, t, lr)
        seen["observed"] = torch.cat([p.double().flatten() for p in out.values()])
        seen["clean"] = clean
        return out, loss

    algo.client_update = tapped
    return seen


# ------------------------------------------------------------------------------ SteFFLe


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
    sigma_primal, sigma_dual = z * 2 * float(cfg["clip"]) / m, z * math.sqrt(2.0)
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


# ------------------------------------------------------------------------------ the job


def audits(spec: dict) -> list[Audited]:
    """Every configured mechanism's audit at this level's number of runs."""
    runs, seed = spec["runs"], int(spec["seed"])
    done = []
    if runs.get("fedsc"):
        done.append(fedsc_scores(spec["fedsc"], int(runs["fedsc"]), seed))
    if runs.get("fedsc_weights"):
        done.append(fedsc_weights_audit(spec["fedsc"], int(runs["fedsc_weights"]), seed))
    if runs.get("dpzv"):
        done += dpzv_audits(spec["dpzv"], int(runs["dpzv"]), seed)
        if spec["dpzv"].get("baselines"):
            done += dpzv_baseline_audits(spec["dpzv"], int(runs["dpzv"]), seed)
    if runs.get("vfl_table_init"):
        done.append(vfl_table_init_audit(spec["dpzv"], int(runs["vfl_table_init"]), seed))
    if runs.get("steffle"):
        done.append(steffle_scores(spec["steffle"], int(runs["steffle"]), seed))
    if runs.get("dp_fermi"):
        done.append(steffle_scores(spec["steffle"], int(runs["dp_fermi"]), seed, central=True))
    if runs.get("tran"):
        done.append(tran_scores(spec["tran"], int(runs["tran"]), seed))
    if runs.get("ling"):
        done.append(ling_scores(spec["ling"], int(runs["ling"]), seed))
    return done
