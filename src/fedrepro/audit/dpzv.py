"""The audit of DPZV's label channel, of its baselines' embeddings and of their table init in clear.

`DPZV` rounds (Algorithm 1) with one flipped training label. The attacker pools the clients
(they chose the batches) and sees the scalars they receive; with `label_privacy: dp_head` it also
sees the head's noisy gradient, the release the accounting composes with Delta.
Each baseline (VAFL, ZOO-VFL, VFL-CZOFO): client 0's slice of one sample replaced, scored on its noisy
embeddings by the server. `check` is the audit block's config check (pure Python: `fedrepro.config` reads it).
"""

from __future__ import annotations

import copy
import math
import time

import numpy as np

from fedrepro.audit.common import Audited, _exact_scores, _rms
from fedrepro.privacy import accountant

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
        self.log(sender, receiver, kind, payload)
        return self.wire.carry(payload)

    def log(self, sender, receiver, kind, payload):
        """Every message is logged, a round's after it (algorithms/dpzv/base.py `serve`, Wire.log)."""
        self.wire.log(sender, receiver, kind, payload)
        if receiver != "server":
            self.received.append(float(payload))

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

    extra = {"clip": float(cfg["clip"]), "server_update": "zo"}  # Algorithm 1 line 7: the ZO server step
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
                    f"round without the canary {info['leak_max']:.3g} (2C/B = {dpzv_privacy.dpzv_sensitivities(c)[0] / b:.3g}); canary GDP mu "
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


def _baseline_settings(cfg: dict, **changes):
    """The paper variant's settings with the baselines' embedding clip C_h (ZOO-VFL keeps its ZO server)."""
    import dataclasses

    paper = dpzv_settings(cfg, "paper")
    extra = {"embed_clip": float(cfg["embed_clip"]), "server_update": paper.extra["server_update"]}
    return dataclasses.replace(paper, extra=extra, **changes)


def dpzv_baseline_audits(cfg: dict, runs: int, seed: int) -> list[Audited]:
    """One row per baseline of `cfg['baselines']`: its noisy embeddings against the server (which sees the ids)."""
    from fedrepro.privacy import dpzv as dpzv_privacy

    data = tiny_vfl_data(int(cfg["num_train"]), clients=int(cfg["clients"]), seed=seed)
    rows = []
    for method in cfg["baselines"]:
        start = time.time()
        settings = _baseline_settings(cfg)
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


def vfl_table_init_audit(cfg: dict, runs: int, seed: int) -> Audited:
    """The VFL baselines' `table_init: forward`: before round 1 every client uploads its initial model's clean
    embedding of every training record, which the server stores in its table. The attacker is the server; the
    canary is client 0's slice of one record (the baselines' pair, `_embedding_canary`); the score is the canary's
    row of the table. No noise touches it, so no finite epsilon holds; the leak-free variant (`table_init: zeros`,
    the default) uploads nothing before round 1 (eps_reference 0)."""
    import importlib

    from fedrepro.algorithms.dpzv import METHODS
    from fedrepro.privacy import dpzv as dpzv_privacy

    start = time.time()
    method = cfg["table_init_baseline"]
    cls = importlib.import_module(METHODS[method].entry.split(":")[0]).ALGORITHM
    data = tiny_vfl_data(int(cfg["num_train"]), clients=int(cfg["clients"]), seed=seed)
    settings = _baseline_settings(cfg, table_init="forward")
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
