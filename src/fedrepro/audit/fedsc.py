"""The audit of FedSC's private mechanism and of its weights in clear.

`FedSC` rounds (Algorithm 1) with DP-CalR (Algorithm 2: 5 passes x 2 augmented views, NormClip,
i.i.d. noise), partial participation (sigma * p), the first sharing round uploading every client;
the attacker is the server and sees every matrix the canary's client uploads. Local training is
switched off (the clients return the weights they received), because FedSC sends the weights in
clear: the paper's DP covers the matrices only, and trained weights would leak the canary outside them.
`fedsc_weights_audit` scores those trained weights (no noise touches them).
"""

from __future__ import annotations

import copy
import math
import time

import numpy as np

from fedrepro.audit.common import Audited, _exact_scores
from fedrepro.privacy import accountant


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
    sens = fedsc_privacy.sensitivity(mu, n0)
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
