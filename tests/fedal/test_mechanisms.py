"""Each method's defining mechanism against an independent float64 reference.

Every test records what a method actually did (the batch, the model before the step, the
gradient the client applied) and recomputes that gradient from the paper's formula with
plain torch, never with the project's loss functions. Where a plausible mistake would give a
nearby number (the global instead of the leave-one-out target, the discriminator before its
step, another client's gradient, a sign flip), the test also checks that the mistake's
gradient is far from the recorded one, so the comparison can tell them apart.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from fedrepro.algorithms.fedal import feddf as feddf_module
from fedrepro.algorithms.fedal.cfd import CFD
from fedrepro.algorithms.fedal.fccl import FCCL
from fedrepro.algorithms.fedal.fd import FD
from fedrepro.algorithms.fedal.fedal import FedAL
from fedrepro.algorithms.fedal.feddf import FedDF
from fedrepro.algorithms.fedal.fedproto import FedProto
from fedrepro.algorithms.fedal.fedproto import PrototypeServer as FedProtoServer
from fedrepro.algorithms.fedal.kd import cross_correlation_loss, non_target_kl
from fedrepro.algorithms.fedal.server import AdversarialConfig, AdversarialHelper, LogitServer

from .helpers import POOL, config, make_data

TOL = dict(rtol=1e-7, atol=1e-10)


pytestmark = pytest.mark.usefixtures("float64")


# ---------------------------------------------------------------------- instruments
class Recorder:
    """Wraps every client's `step`, `local_batch` and `public_batch` to log what happened.

    `steps[i]` = (client id, model copy before the step, last private batch, last public
    batch, gradient per parameter). The wrapper applies the same Adam step as `Client.step`.
    """

    def __init__(self, algo):
        self.steps, self.last_local, self.last_public = [], {}, {}
        for client in algo.clients:
            self._wrap(client)

    def _wrap(self, c):
        local, public = c.local_batch, c.public_batch

        def local_batch():
            self.last_local[c.cid] = local()
            return self.last_local[c.cid]

        def public_batch():
            self.last_public[c.cid] = public()
            return self.last_public[c.cid]

        def step(loss):
            before = copy.deepcopy(c.model)
            c.opt.zero_grad(set_to_none=True)
            loss.backward()
            grads = [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in c.model.parameters()]
            self.steps.append((c.cid, before, self.last_local.get(c.cid), self.last_public.get(c.cid), grads))
            c.opt.step()

        c.local_batch, c.public_batch, c.step = local_batch, public_batch, step


def grads_of(loss, model):
    params = list(model.parameters())
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g.detach() for p, g in zip(params, grads)]


def assert_grads(actual, expected, **tol):
    for a, b in zip(actual, expected, strict=True):
        torch.testing.assert_close(a, b, **(tol or TOL))


def distance(a, b) -> float:
    return float(sum((x - y).norm() ** 2 for x, y in zip(a, b)) ** 0.5)


def kl(teacher_logits, student_logits, temperature=1.0):
    """Batch mean of KL(softmax(t/E) || softmax(s/E)), written out."""
    p = torch.softmax(teacher_logits.detach() / temperature, -1)
    return (p * (p.log() - torch.log_softmax(student_logits / temperature, -1))).sum(-1).mean()


def live(model):
    model = copy.deepcopy(model)
    for p in model.parameters():
        p.requires_grad_(True)
    return model


# ---------------------------------------------------------------------- FedAL / FedMD-LF / FedMD
def _fedal_run(use_al, use_lf, tau=2, rounds=2):
    """Run FedAL with recording; returns the algo, the recorder and per-stage reference data."""
    torch.manual_seed(0)
    adv = AdversarialConfig(lr=5e-2)  # a discriminator that moves visibly in one step
    algo = FedAL(make_data(), POOL, config(tau=tau), seed=0, use_al=use_al, use_lf=use_lf, adversarial=adv)
    rec = Recorder(algo)
    stages = []  # (kind, anchors taken by the test, [(step range, info)])
    orig_local, orig_global, orig_iter = algo.local_stage, algo.global_stage, algo.global_iteration

    def local_stage():
        anchors = [copy.deepcopy(c.model) for c in algo.clients]
        start = len(rec.steps)
        out = orig_local()
        stages.append(("local", anchors, [(range(start, len(rec.steps)), None)]))
        return out

    def global_iteration(anchors):
        info = {"models": [copy.deepcopy(c.model) for c in algo.clients]}
        respond = algo.server.respond

        def recorded_respond(logits):
            info["disc_before"] = copy.deepcopy(algo.server.adversary.disc) if use_al else None
            out = respond(logits)
            info["disc"] = copy.deepcopy(algo.server.adversary.disc) if use_al else None
            return out

        algo.server.respond = recorded_respond
        start = len(rec.steps)
        out = orig_iter(anchors)
        algo.server.respond = respond
        stages[-1][2].append((range(start, len(rec.steps)), info))
        return out

    def global_stage():
        stages.append(("global", [copy.deepcopy(c.model) for c in algo.clients], []))
        return orig_global()

    algo.local_stage, algo.global_stage, algo.global_iteration = local_stage, global_stage, global_iteration
    for t in range(1, rounds + 1):
        algo.round(t)
    return algo, rec, stages


def _global_reference(n, xb, info, anchor, use_al, use_lf, target="leave_one_out", disc_key="disc", al_sign=1.0):
    """Eq. (17): KL(p_bar_-n || p_n) + U_n (the updated discriminator) + r_glo, by autograd."""
    model = live(info["models"][n])
    with torch.no_grad():
        others = [m(xb) for m in info["models"]]
    f = model(xb)
    pool = [o for m, o in enumerate(others) if m != n] if target == "leave_one_out" else others
    loss = kl(torch.stack(pool).mean(0), f, 1.0)
    if use_al:
        log_post = torch.log_softmax(info[disc_key](torch.softmax(f / 2.0, -1)), -1)
        loss = loss + al_sign * log_post[:, n].mean()  # U_n, eq. (7); clients minimise it
    if use_lf:
        with torch.no_grad():
            a = anchor(xb)
        loss = loss + kl(a, f)  # r_glo, eq. (12)
    return grads_of(loss, model)


@pytest.mark.parametrize(
    "use_al,use_lf", [(True, True), (False, True), (False, False)], ids=["fedal", "fedmd_lf", "fedmd"]
)
def test_every_client_step_matches_the_papers_losses(use_al, use_lf):
    """Local (15) and global (17) steps of Algorithm 1, client by client, at tau = 2."""
    algo, rec, stages = _fedal_run(use_al, use_lf)
    checked = 0
    for kind, anchors, parts in stages:
        for steps, info in parts:
            assert sorted(rec.steps[i][0] for i in steps) == sorted(
                list(range(algo.num_clients)) * (algo.cfg.tau if kind == "local" else 1)
            )
            for i in steps:
                n, before, (x, y), public, grads = rec.steps[i]
                if kind == "local":  # CE + r_loc, anchor = round start (11)
                    model = live(before)
                    f = model(x)
                    loss = F.cross_entropy(f, y)
                    if use_lf:
                        with torch.no_grad():
                            a = anchors[n](x)
                        loss = loss + kl(a, f)
                    assert_grads(grads, grads_of(loss, model))
                else:
                    assert_grads(grads, _global_reference(n, public[1], info, anchors[n], use_al, use_lf))
                checked += 1
    assert checked == 2 * 2 * algo.cfg.tau * algo.num_clients  # 2 rounds x (local + global)


def _second_global_iteration(stages, rnd=1):
    globals_ = [s for s in stages if s[0] == "global"]
    return globals_[rnd][1], globals_[rnd][2][1]


def test_the_distinguishing_mistakes_give_other_gradients():
    """The reference above can tell each mechanism from its broken variant: leave-one-out vs
    global target, the updated vs the old discriminator, +U_n vs -U_n, the stage-start anchor vs
    none, and client n's own payoff gradient vs client 0's."""
    algo, rec, stages = _fedal_run(True, True)
    anchors, (steps, info) = _second_global_iteration(stages)
    for i in list(steps)[1:]:
        n, _, _, (_, xb), grads = rec.steps[i]
        right = _global_reference(n, xb, info, anchors[n], True, True)
        assert_grads(grads, right)
        scale = distance(right, [torch.zeros_like(g) for g in right])
        for wrong in (
            _global_reference(n, xb, info, anchors[n], True, True, target="all"),
            _global_reference(n, xb, info, anchors[n], True, True, disc_key="disc_before"),
            _global_reference(n, xb, info, anchors[n], True, True, al_sign=-1.0),
            _global_reference(n, xb, info, anchors[n], True, False),
            _global_reference_other_payoff(n, xb, info, anchors[n]),
        ):
            assert distance(wrong, right) > 1e-4 * scale + 1e-8


def _global_reference_other_payoff(n, xb, info, anchor):
    """Client n's step if it received client 0's dU_0/df_0 instead of its own."""
    model = live(info["models"][n])
    with torch.no_grad():
        others = [m(xb) for m in info["models"]]
        g0 = (
            torch.autograd.functional.jacobian(
                lambda f0: torch.log_softmax(info["disc"](torch.softmax(f0 / 2.0, -1)), -1)[:, 0].sum(), others[0]
            )
            / xb.shape[0]
        )
    f = model(xb)
    loss = kl(torch.stack([o for m, o in enumerate(others) if m != n]).mean(0), f)
    loss = loss + (f * g0).sum()
    with torch.no_grad():
        a = anchor(xb)
    return grads_of(loss + kl(a, f), model)


def test_lf_anchors_pull_back_from_the_second_step_on():
    """At tau > 1 both anchors are fixed at the stage start: r_loc / r_glo vanish at the first
    step of a stage and are non-zero (and in the gradient) at the second."""
    algo, rec, stages = _fedal_run(True, True, tau=3, rounds=1)
    for kind, anchors, parts in stages:
        for steps, info in parts[-1:]:
            i = list(steps)[-1]
            n, before, batch, public, grads = rec.steps[i]
            x = batch[0] if kind == "local" else public[1]
            with torch.no_grad():
                r = kl(anchors[n](x), before(x))
            assert float(r) > 1e-8, kind
            if kind == "global":
                without = _global_reference(n, x, info, anchors[n], True, False)
                assert distance(grads, without) > 1e-6


def test_discriminator_step_is_one_adam_ascent_step_on_the_mean_payoff():
    """(8): the server maximises (1/N) sum_n mean_x log D_n(p_n), i.e. one Adam step on the
    "which client" cross-entropy; its answer is dU_n/df_n with the UPDATED discriminator."""
    torch.manual_seed(3)
    n_players, k, b, temp, lr = 3, 4, 5, 2.0, 1e-2
    adversary = AdversarialHelper(k, n_players, (8, 8), lr, "adam", temp)
    server = LogitServer(n_players, adversary)
    logits = [torch.randn(b, k) for _ in range(n_players)]
    ref = copy.deepcopy(adversary.disc)
    opt = torch.optim.Adam(ref.parameters(), lr=lr)
    probs = torch.softmax(torch.stack(logits) / temp, -1)
    labels = torch.arange(n_players).repeat_interleave(b)
    opt.zero_grad()
    F.cross_entropy(ref(probs.reshape(-1, k)), labels).backward()
    opt.step()
    replies = server.respond(logits)
    for p, q in zip(adversary.disc.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q)
    for n in range(n_players):
        f = logits[n].clone().requires_grad_(True)
        u = torch.log_softmax(ref(torch.softmax(f / temp, -1)), -1)[:, n]
        (g,) = torch.autograd.grad(u.sum(), f)
        torch.testing.assert_close(replies[n]["grad_u"], g)
        torch.testing.assert_close(replies[n]["mean_logits"], torch.stack(logits).mean(0))


def test_adversarial_clients_make_the_discriminator_less_sure_of_them():
    """Sign of the clients' adversarial term: with the discriminator held (all but) fixed (lr 1e-12) and only
    U_n in the loss, one global iteration lowers every client's U_n on its batch."""
    torch.manual_seed(0)
    algo = FedAL(
        make_data(),
        POOL,
        config(tau=1, weights={"kd": 0.0, "al": 1.0, "lf": 0.0}),
        seed=0,
        use_al=True,
        use_lf=False,
        adversarial=AdversarialConfig(lr=1e-12),
    )
    rec = Recorder(algo)
    disc = algo.server.adversary.disc

    def u(model, n, xb):
        with torch.no_grad():
            return float(torch.log_softmax(disc(torch.softmax(model(xb) / 2.0, -1)), -1)[:, n].mean())

    before = [copy.deepcopy(c.model) for c in algo.clients]
    algo.global_iteration([None] * algo.num_clients)
    xb = rec.last_public[0][1]
    for n, client in enumerate(algo.clients):
        assert u(client.model, n, xb) < u(before[n], n, xb) - 1e-6


# ---------------------------------------------------------------------- FedDF
class RecordingAdam(feddf_module.Adam):
    """The project's Adam, logging (parameters before, gradients) at every step."""

    log: list = []

    def step(self):
        RecordingAdam.log.append(
            ([p.detach().clone() for p in self.params], [p.grad.detach().clone() for p in self.params], self)
        )
        super().step()


def test_feddf_distils_the_averaged_model_toward_the_mean_teacher_logits(monkeypatch):
    """FedDF (Lin et al. 2020, Alg. 1): each group model starts from the data-size weighted
    average of its members, and is distilled toward softmax(mean of the N teachers' LOGITS / E),
    teachers in eval mode."""
    monkeypatch.setattr(feddf_module, "Adam", RecordingAdam)
    RecordingAdam.log = []
    torch.manual_seed(0)
    data = make_data(num_clients=4)
    algo = FedDF(data, POOL, config(kd_temperature=2.0), 1, assignment=[0, 1, 0, 1])
    modes = []
    for t in algo.teachers:
        t.register_forward_pre_hook(lambda m, _: modes.append(m.training))
    batches = []
    nxt = algo.server_public.next
    algo.server_public.next = lambda b: batches.append(nxt(b)) or batches[-1]
    algo.round(1)
    assert modes and not any(modes)  # teachers evaluated in eval mode
    first = {}  # each group's optimiser's first step, in group order
    for before, grads, opt in RecordingAdam.log:
        first.setdefault(id(opt), (before, grads))
    assert len(first) == len(algo.groups)
    xb = data.public_x[torch.as_tensor(batches[0])]
    teachers = [copy.deepcopy(c.model).eval() for c in algo.clients]
    with torch.no_grad():
        mean_logits = torch.stack([m(xb) for m in teachers]).mean(0)
        mean_probs = torch.stack([torch.softmax(m(xb) / 2.0, -1) for m in teachers]).mean(0)
    for (before, grads), g in zip(first.values(), algo.groups):
        members = algo.members[g]
        sizes = torch.tensor([float(algo.clients[n].num_samples) for n in members])
        student = live(algo.clients[members[0]].model)
        for name, p in student.named_parameters():
            stacked = torch.stack([dict(algo.clients[n].model.named_parameters())[name].detach() for n in members])
            p.data.copy_((stacked * (sizes / sizes.sum()).reshape(-1, *[1] * (stacked.dim() - 1))).sum(0))
        for p, b in zip(student.parameters(), before):
            torch.testing.assert_close(p.detach(), b)  # FedAvg within the group
        f = student(xb)
        assert_grads(grads, grads_of(kl(mean_logits, f, 2.0), student))
        p_target = mean_probs
        f = student(xb)
        wrong = grads_of((p_target * (p_target.log() - torch.log_softmax(f / 2.0, -1))).sum(-1).mean(), student)
        assert distance(wrong, grads) > 1e-6  # averaging probabilities is a different target


def test_feddf_al_students_add_their_own_payoff_under_the_updated_discriminator(monkeypatch):
    """FedDF-AL (paper Fig. 10): each architecture group's student takes, besides FedDF's KL to
    the mean teacher logits, the adversarial term U_g = log D_g(softmax(f_g / E_d)) of FedAL's
    eq. (7) with the discriminator AFTER its step on the students' logits (players = groups)."""
    monkeypatch.setattr(feddf_module, "Adam", RecordingAdam)
    RecordingAdam.log = []
    torch.manual_seed(0)
    data = make_data(num_clients=4)
    algo = FedDF(
        data,
        POOL,
        config(kd_temperature=2.0),
        1,
        use_al=True,
        assignment=[0, 1, 0, 1],
        adversarial=AdversarialConfig(lr=5e-2),
    )
    batches, discs = [], []
    nxt, step_and_grads = algo.server_public.next, algo.adversary.step_and_grads
    algo.server_public.next = lambda b: batches.append(nxt(b)) or batches[-1]

    def recorded(logits):
        discs.append(copy.deepcopy(algo.adversary.disc))
        out = step_and_grads(logits)
        discs.append(copy.deepcopy(algo.adversary.disc))
        return out

    algo.adversary.step_and_grads = recorded
    algo.round(1)
    first = {}
    for before, grads, opt in RecordingAdam.log:
        first.setdefault(id(opt), (before, grads))
    xb = data.public_x[torch.as_tensor(batches[0])]
    with torch.no_grad():
        mean_logits = torch.stack([copy.deepcopy(c.model).eval()(xb) for c in algo.clients]).mean(0)
    disc_before, disc_after = discs[0], discs[1]
    for g, ((before, grads), group) in enumerate(zip(first.values(), algo.groups)):
        student = live(algo.group_models[group])
        for p, b in zip(student.parameters(), before):
            p.data.copy_(b)

        def step_grads(disc, sign=1.0, al=True, student=student, g=g):
            f = student(xb)
            loss = kl(mean_logits, f, 2.0)
            if al:
                loss = loss + sign * torch.log_softmax(disc(torch.softmax(f / 2.0, -1)), -1)[:, g].mean()
            return grads_of(loss, student)

        right = step_grads(disc_after)
        assert_grads(grads, right)
        scale = distance(right, [torch.zeros_like(r) for r in right])
        for wrong in (step_grads(disc_after, al=False), step_grads(disc_after, sign=-1.0), step_grads(disc_before)):
            assert distance(wrong, right) > 1e-4 * scale + 1e-8


def test_fedavg_clients_start_from_the_global_model_which_becomes_the_size_weighted_average(monkeypatch):
    """FedAvg inside the FedAL comparison: every client starts the round from the global weights,
    and the new global model is the data-size weighted mean of the uploaded client models."""
    from fedrepro.algorithms.fedal import fedavg as fedavg_module
    from fedrepro.algorithms.fedal.fedavg import FedAvg

    torch.manual_seed(0)
    algo = FedAvg(make_data(num_clients=4), POOL[:1], config(tau=3), 0)
    starts = []
    original = fedavg_module.local_update
    monkeypatch.setattr(
        fedavg_module,
        "local_update",
        lambda client, start, steps, use_lf=False: (
            starts.append(copy.deepcopy(start)) or original(client, start, steps, use_lf)
        ),
    )
    for t in (1, 2):
        before = copy.deepcopy(algo.global_state)
        algo.round(t)
        assert len(starts) == 4 * t
        for start in starts[-4:]:
            for key in before:
                torch.testing.assert_close(start[key], before[key])
        sizes = torch.tensor([float(c.num_samples) for c in algo.clients])
        assert len(set(sizes.tolist())) > 1
        weights = sizes / sizes.sum()
        for key, value in algo.global_state.items():
            stacked = torch.stack([c.model.state_dict()[key].detach() for c in algo.clients])
            expected = (stacked * weights.reshape(-1, *[1] * (stacked.dim() - 1))).sum(0)
            torch.testing.assert_close(value, expected)
            assert float((stacked.mean(0) - expected).abs().max()) > 1e-9


# ---------------------------------------------------------------------- FCCL / FCCL+
def _cross_correlation_reference(a, b, weight=0.0051, fccl=True):
    """FCCL eq. (3), written with loops over the class pairs (float64)."""
    za = (a - a.mean(0)) / (a.std(0) + 1e-8)
    zb = (b - b.mean(0)) / (b.std(0) + 1e-8)
    m = za.T @ zb / a.shape[0]
    k = m.shape[0]
    loss = sum((1 - m[u, u]) ** 2 for u in range(k))
    off = sum(((1 + m[u, v]) if fccl else m[u, v]) ** 2 for u in range(k) for v in range(k) if u != v)
    return loss + weight * off


def test_fccl_cross_correlation_is_fcclss_one_plus_m_squared():
    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(16, 5, generator=gen), torch.randn(16, 5, generator=gen)
    torch.testing.assert_close(cross_correlation_loss(a, b), _cross_correlation_reference(a, b))
    barlow = _cross_correlation_reference(a, b, fccl=False)
    assert abs(float(barlow - cross_correlation_loss(a, b))) > 1e-3


def _nt_kl_reference(teacher, student, y, t):
    """FNTD as the FCCL+ authors' code computes it: softmax over all classes, the target entry
    dropped without renormalising, then KLDivLoss(log q_nt, p_nt, batchmean)."""
    keep = ~F.one_hot(y, teacher.shape[-1]).bool()
    p = torch.softmax(teacher.detach() / t, -1)[keep].reshape(len(y), -1)
    q = torch.softmax(student / t, -1)[keep].reshape(len(y), -1)
    return F.kl_div(q.log(), p, reduction="batchmean")


def test_non_target_kl_is_the_authors_unrenormalised_form():
    gen = torch.Generator().manual_seed(6)
    t, s = torch.randn(8, 5, generator=gen) * 2, torch.randn(8, 5, generator=gen) * 2
    y = torch.randint(0, 5, (8,), generator=gen)
    torch.testing.assert_close(non_target_kl(t, s, y, 3.0), _nt_kl_reference(t, s, y, 3.0))
    keep = ~F.one_hot(y, 5).bool()
    renormalised = kl(t[keep].reshape(8, -1), s[keep].reshape(8, -1), 3.0)
    assert abs(float(non_target_kl(t, s, y, 3.0) - renormalised)) > 1e-3


@pytest.mark.parametrize("plus", [False, True], ids=["fccl", "fccl_plus"])
def test_fccl_steps_match_the_collaborative_and_local_losses(plus):
    torch.manual_seed(0)
    algo = FCCL(make_data(), POOL, config(tau=2, kd_temperature=2.0), 0, plus=plus, pretrain_iters=4)
    rec = Recorder(algo)
    intra = [copy.deepcopy(m) for m in algo.intra] if not plus else None
    log, round_start = [], []
    collab, local, run_round = algo._collaborative_iteration, algo._local_updates, algo.round

    def round_rec(t):
        round_start[:] = [copy.deepcopy(c.model) for c in algo.clients]
        return run_round(t)

    def collab_rec():
        models, start = [copy.deepcopy(c.model) for c in algo.clients], len(rec.steps)
        out = collab()
        log.append(("collab", models, range(start, len(rec.steps))))
        return out

    def local_rec(n, teacher):
        start = len(rec.steps)
        out = local(n, teacher)
        # the inter-domain teacher: the model from the end of the previous round (= this round's start)
        log.append(("local", round_start[n], range(start, len(rec.steps))))
        return out

    algo._collaborative_iteration, algo._local_updates = collab_rec, local_rec
    for t in (1, 2):
        round_rec(t)
    checked = 0
    for kind, saved, steps in log:
        for i in steps:
            n, before, private, public, grads = rec.steps[i]
            model = live(before)
            if kind == "collab":
                xb = public[1]
                with torch.no_grad():
                    mean = torch.stack([m(xb) for m in saved]).mean(0)
                h = model.features(xb)
                f = model.head(h)
                loss = _cross_correlation_reference(f, mean)
                if plus:

                    def sims(feat):
                        z = F.normalize(feat, dim=-1)
                        s = z @ z.T / 0.02
                        return torch.stack([torch.cat([s[r, :r], s[r, r + 1 :]]) for r in range(len(s))])

                    with torch.no_grad():
                        mean_sim = torch.stack([sims(m.features(xb)) for m in saved]).mean(0)
                    loss = loss + 3.0 * kl(mean_sim, sims(h))
            else:
                x, y = private
                f = model(x)
                with torch.no_grad():
                    inter = saved(x)
                loss = F.cross_entropy(f, y)
                if plus:
                    loss = loss + 9.0 * _nt_kl_reference(inter, f, y, 3.0)
                else:
                    with torch.no_grad():
                        own = intra[n](x)
                    loss = loss + kl(inter, f, 2.0) + kl(own, f, 2.0)  # dual-domain KD at E_kd
            assert_grads(grads, grads_of(loss, model), rtol=1e-6, atol=1e-9)
            checked += 1
    assert checked == 2 * 2 * 2 * algo.num_clients
    if not plus:  # the intra-domain teacher: pretrained on private data only, then frozen
        for m, m0 in zip(algo.intra, intra):
            for p, q in zip(m.parameters(), m0.parameters()):
                torch.testing.assert_close(p, q)
        assert algo.summary()["pretrain_steps"] == 4


def test_fccl_intra_teacher_is_pretrained_on_private_data():
    torch.manual_seed(0)
    data = make_data()
    untrained = FCCL(data, POOL, config(), 0, pretrain_iters=0)
    torch.manual_seed(0)
    trained = FCCL(data, POOL, config(), 0, pretrain_iters=30)
    for n, (a, b) in enumerate(zip(untrained.intra, trained.intra)):
        x, y = data.clients_x[n], data.clients_y[n]
        with torch.no_grad():
            assert F.cross_entropy(b(x), y) < F.cross_entropy(a(x), y) - 0.1


# ---------------------------------------------------------------------- CFD
def test_cfd_server_distils_its_model_then_clients_distil_from_the_updated_server():
    """CFD: the server takes one Adam step of its own model toward the mean client probabilities
    on the public batch, then every client takes a KL step toward the UPDATED server's logits."""
    torch.manual_seed(0)
    data = make_data()
    algo = CFD(data, POOL, config(kd_temperature=2.0), 0)
    rec = Recorder(algo)
    models = [copy.deepcopy(c.model) for c in algo.clients]
    server = copy.deepcopy(algo.server.model)
    algo._global_iteration()
    xb = data.public_x[torch.as_tensor(algo.public_stream().next(algo.cfg.batch_size))]  # the first draw
    torch.testing.assert_close(rec.last_public[0][1], xb)
    opt = torch.optim.Adam(server.parameters(), lr=algo.cfg.lr)
    with torch.no_grad():
        mean_probs = torch.stack([torch.softmax(m(xb) / 2.0, -1) for m in models]).mean(0)
    opt.zero_grad()
    (mean_probs * (mean_probs.log() - torch.log_softmax(server(xb) / 2.0, -1))).sum(-1).mean().backward()
    opt.step()
    for p, q in zip(algo.server.model.parameters(), server.parameters()):
        torch.testing.assert_close(p, q)
    with torch.no_grad():
        target = server(xb)
    for _, before, _, _, grads in rec.steps:
        model = live(before)
        assert_grads(grads, grads_of(kl(target, model(xb), 2.0), model))


# ---------------------------------------------------------------------- FD
def test_fd_targets_are_the_other_clients_per_label_mean_logits():
    """FD (Jeong et al. 2018): client n distils toward the global per-label average logit of
    the OTHER clients, collected over the round's batches; labels nobody else saw stay unknown."""
    torch.manual_seed(0)
    algo = FD(make_data(), POOL, config(tau=3, kd_temperature=2.0), 0)
    rec = Recorder(algo)
    algo.round(1)
    k = algo.data.num_classes
    per_client = []
    for n in range(algo.num_clients):
        sums, counts = torch.zeros(k, k), torch.zeros(k)
        for cid, before, (x, y), _, _ in rec.steps:
            if cid == n:
                with torch.no_grad():
                    f = before(x)
                for row, label in zip(f, y):
                    sums[label] += row
                    counts[label] += 1
        per_client.append((sums, counts))
    for n in range(algo.num_clients):
        sums = sum(s for m, (s, _) in enumerate(per_client) if m != n)
        counts = sum(c for m, (_, c) in enumerate(per_client) if m != n)
        seen = counts > 0
        assert torch.equal(algo.known[n], seen)
        torch.testing.assert_close(algo.targets[n][seen], sums[seen] / counts[seen, None])
        everyone = (sums + per_client[n][0])[seen] / (counts + per_client[n][1])[seen, None]
        assert float((everyone - algo.targets[n][seen]).abs().max()) > 1e-4
    # round 2: the step's gradient is CE + fd_weight * KL(target_y || p) on the known labels
    start = len(rec.steps)
    algo.round(2)
    n, before, (x, y), _, grads = rec.steps[start]
    model = live(before)
    f = model(x)
    mask = per_client_known(per_client, n)[y]
    targets = per_client_targets(per_client, n)
    loss = F.cross_entropy(f, y) + kl(targets[y[mask]], f[mask], 2.0) * mask.double().mean()
    assert_grads(grads, grads_of(loss, model))


def per_client_known(per_client, n):
    return sum(c for m, (_, c) in enumerate(per_client) if m != n) > 0


def per_client_targets(per_client, n):
    sums = sum(s for m, (s, _) in enumerate(per_client) if m != n)
    counts = sum(c for m, (_, c) in enumerate(per_client) if m != n)
    return sums / counts.clamp_min(1)[:, None]


# ---------------------------------------------------------------------- FedProto
@pytest.mark.parametrize("average", ["unweighted", "count"])
def test_fedproto_exchanges_class_prototypes(average):
    """FedProto (Tan et al. 2022): client n's local prototype of label j is its mean feature of j
    (eq. (2)); the global one averages the local prototypes of the clients holding j, unweighted
    (the authors' `proto_aggregation`) or weighted by their counts (eq. (3)); the next round's loss
    is CE + lambda * MSE(h(x), C_bar^(y)) (eq. (4))."""
    torch.manual_seed(0)
    algo = FedProto(
        make_data(), POOL, config(tau=3), 0, proto_weight=0.5, variant="prototypes", prototype_average=average
    )
    rec = Recorder(algo)
    algo.round(1)
    k, d = algo.prototypes.shape
    sums, counts = torch.zeros(algo.num_clients, k, d), torch.zeros(algo.num_clients, k)
    for n, before, (x, y), _, _ in rec.steps:
        with torch.no_grad():
            h = before.features(x)
        for row, label in zip(h, y):
            sums[n, label] += row
            counts[n, label] += 1
    weights = counts if average == "count" else (counts > 0).double()
    local = sums / counts.clamp_min(1)[:, :, None]
    seen = counts.sum(0) > 0
    protos = (weights[:, :, None] * local).sum(0) / weights.sum(0).clamp_min(1)[:, None]
    assert torch.equal(algo.known, seen)
    torch.testing.assert_close(algo.prototypes[seen], protos[seen])
    start = len(rec.steps)
    algo.round(2)
    for _, before, (x, y), _, grads in rec.steps[start : start + 1]:
        model = live(before)
        h = model.features(x)
        mask = seen[y]
        reg = ((h[mask] - protos[y[mask]]) ** 2).sum() / (len(y) * d)
        loss = F.cross_entropy(model.head(h), y) + 0.5 * reg
        assert_grads(grads, grads_of(loss, model))


def test_fedproto_unweighted_and_count_averages_differ_on_unequal_counts():
    server = lambda average: FedProtoServer(average)  # noqa: E731
    uploads = [
        {"prototypes": torch.tensor([[1.0, 0.0]]), "counts": torch.tensor([3.0])},
        {"prototypes": torch.tensor([[0.0, 1.0]]), "counts": torch.tensor([1.0])},
    ]
    torch.testing.assert_close(server("unweighted").respond(uploads)["prototypes"], torch.tensor([[0.5, 0.5]]))
    torch.testing.assert_close(server("count").respond(uploads)["prototypes"], torch.tensor([[0.75, 0.25]]))


def test_fedproto_public_features_distils_features_toward_the_leave_one_out_average():
    """The FedAL paper's adaptation: tau CE steps, then tau global iterations in which each client
    minimises lambda * MSE(h_n(x), mean_{m != n} h_m(x)) on the shared public batch."""
    torch.manual_seed(0)
    algo = FedProto(make_data(), POOL, config(tau=2), 0, proto_weight=0.5)
    assert algo.variant == "public_features"
    rec = Recorder(algo)
    algo.round(1)
    n_clients, tau = algo.num_clients, 2
    assert len(rec.steps) == n_clients * tau * 2
    for it in range(tau):
        block = rec.steps[n_clients * tau + it * n_clients :][:n_clients]
        xb = block[0][3][1]
        with torch.no_grad():
            feats = [before.features(xb) for _, before, _, _, _ in block]
        for n, before, _, public, grads in block:
            assert torch.equal(public[1], xb)  # one public batch shared by every client
            model = live(before)
            target = sum(f for m, f in enumerate(feats) if m != n) / (n_clients - 1)
            loss = 0.5 * F.mse_loss(model.features(xb), target)
            assert_grads(grads, grads_of(loss, model))


def test_fccl_local_steps_sets_the_local_updating_length():
    torch.manual_seed(0)
    algo = FCCL(make_data(), POOL, config(tau=2), 0, plus=True, local_steps=5)
    rec = Recorder(algo)
    algo.round(1)
    assert len(rec.steps) == algo.num_clients * (2 + 5)  # tau collaborative + local_steps local
    summary = algo.summary()
    assert (summary["local_steps_per_round"], summary["tau"], summary["local_steps_total"]) == (5, 2, 5)
    assert algo.iteration == 2
