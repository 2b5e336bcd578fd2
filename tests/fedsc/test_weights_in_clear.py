"""What FedSC's server receives (Algorithm 1): the noised correlation matrices and, in the clear, every
participant's model weights, a noise-free function of its training images. So no finite epsilon holds
against the server, and every FedSC privacy table says so (inf, with the reason); the printed epsilons
hold only against a party that sees the matrices alone."""

import importlib.util
import json
import math
from pathlib import Path

import pandas as pd
import torch

from fedrepro.algorithms.fedsc.base import SSLData
from fedrepro.algorithms.fedsc.fedsc import FedSC
from fedrepro.privacy import fedsc as fedsc_privacy
from fedrepro.report import fedsc as report
from tests.fedsc.helpers import tiny_spec

ROOT = Path(__file__).resolve().parents[2]


def _private_spec(eps: float) -> dict:
    """FedSC at eps (delta 1e-2), sharing from round 2 of 2 (Table 6's 't > T/2')."""
    return tiny_spec(
        method="fedsc",
        rounds=2,
        sharing={"after": 0.5, "every": 1},
        privacy={"eps": eps, "delta": 1e-2, "deltas": [1e-2]},
        alpha={"start": 1.0, "end": 0.2},
    )


def _server_inbox(data: SSLData, eps: float, seed: int = 0) -> list[tuple[int, str, str, object]]:
    """(round, sender, kind, payload) of every message the server receives over two rounds."""
    torch.manual_seed(seed)  # the initial weights (the runner seeds them so)
    algorithm = FedSC(_private_spec(eps), data, seed)
    inbox, send = [], algorithm.wire.send

    def spy(sender, receiver, kind, payload):
        delivered = send(sender, receiver, kind, payload)
        if receiver == "server":
            inbox.append((algorithm.wire.round, sender, kind, delivered))
        return delivered

    algorithm.wire.send = spy
    for t in (1, 2):
        algorithm.round(t)
    assert algorithm.sigma > 0
    return inbox


def _with_one_image_replaced(data: SSLData) -> SSLData:
    """The same data with client 0's first training image replaced by another (inverted) image."""
    x = data.x_train.clone()
    first = int(data.clients[0][0])
    x[first] = 255 - x[first]
    return SSLData(x, data.y_train, data.x_test, data.y_test, data.clients, data.num_classes, data.mean, data.std)


def _weights(inbox, t: int, sender: str) -> dict:
    return next(p for r, s, kind, p in inbox if r == t and s == sender and kind == "weights")


def _equal(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def test_the_server_receives_weights_that_are_a_noise_free_function_of_one_training_image(tiny_digits):
    """Round 1 (before any share): client 0's uploaded weights carry no noise at any privacy level (eps 3
    and eps 300 upload the same tensors), and replacing one of its training images changes them."""
    strict, loose = _server_inbox(tiny_digits, 3.0), _server_inbox(tiny_digits, 300.0)
    assert {kind for _, _, kind, _ in strict} == {"weights", "corr_matrix"}
    assert _equal(_weights(strict, 1, "client0"), _weights(loose, 1, "client0"))  # no noise in the weights
    neighbour = _server_inbox(_with_one_image_replaced(tiny_digits), 3.0)
    assert not _equal(_weights(strict, 1, "client0"), _weights(neighbour, 1, "client0"))
    assert _equal(_weights(strict, 1, "client1"), _weights(neighbour, 1, "client1"))  # only its owner's changed
    # the matrices, by contrast, are noised: the same data at another noise level sends other matrices
    matrices = [[p for _, s, kind, p in inbox if kind == "corr_matrix" and s == "client1"] for inbox in (strict, loose)]
    assert not torch.equal(matrices[0][0], matrices[1][0])


def _summary(tmp_path: Path) -> str:
    path = tmp_path / "summary.json"
    epsilons = [{"client": 0, "T_j": 1, "n_j": 20, "delta": 0.01, "sigma": 0.1, "eps_paper": 1.0, "eps_sqrt2": 1.4}]
    epsilons[0].update(eps_accountant=1.5, eps_pld=1.2)
    seeds = {"0": {"privacy": {"epsilons": epsilons}}}
    path.write_text(json.dumps({"spec": {"privacy": {"eps": 3}}, "seeds": seeds}))
    return str(path)


def test_every_privacy_table_prints_inf_against_the_server_with_the_reason(tmp_path):
    realised = report.privacy_frame([{"path": _summary(tmp_path), "row": "eps3", "column": "digits"}])
    assert math.isinf(realised.loc[0, "eps_vs_server"]) and "in the clear" in realised.loc[0, "why"]
    assert realised.loc[0, "adversary"] == fedsc_privacy.MATRICES_ONLY and realised.loc[0, "eps_pld_max"] == 1.2
    row = {"dataset": "SVHN", "eps": 3, "delta": 1e-2, "mu": 2, "sigma": 0.0034, "shares": 100, "n": 10000}
    table6 = report.table6_frame([row])
    assert math.isinf(table6.loc[0, "ε against the server"]) and "in the clear" in table6.loc[0, "why"]
    assert "against the server (and the other clients) ε = ∞" in fedsc_privacy.THREAT_NOTE


def test_privacy_epsilons_tool_calls_the_bound_for_what_is_sent_inf():
    """tools/privacy_epsilons.py: the bound for what FedSC sends is inf; the tight epsilon is printed as the
    matrices-alone bound, with that adversary named."""
    spec = importlib.util.spec_from_file_location("privacy_epsilons", ROOT / "tools" / "privacy_epsilons.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    table = pd.DataFrame({"dataset": ["digits"], "run": ["eps3"], "label ε": [3], "eps_paper_max": [1.3]})
    out = tool.fedsc(table.assign(eps_pld_max=1.91))
    assert out.loc[0, "bound_for_what_is_sent"].startswith("inf (")
    assert "matrices alone: 1.91" in out.loc[0, "bound_for_what_is_sent"]
    assert fedsc_privacy.MATRICES_ONLY in out.loc[0, "adversary"]
