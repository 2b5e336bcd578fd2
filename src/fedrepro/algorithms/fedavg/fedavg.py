"""Supervised FedAvg (McMahan et al. 2017), the shared baseline.

Each round the server samples clients, sends the global weights, every sampled
client runs `local_steps` SGD steps of batch `batch_size` on its own data, and
the server averages the returned weights, weighted by client data size
(`weighting: size`) or uniformly (`weighting: uniform`).

Clients that share one architecture without trained buffers are trained as one
batched program (`batched: true`, the default); `batched: false` runs the
classic per-client loop, with identical maths (a test checks they agree).
Config keys `precision` and `channels_last` (fedrepro.fl.precision) apply to both.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from fedrepro.data.arrays import load_prepared
from fedrepro.data.partition import load_partition
from fedrepro.data.tensors import ClientBatches, to_tensors
from fedrepro.eval.classify import evaluate_classifier
from fedrepro.eval.health import check_chance, majority_rate
from fedrepro.fl import batched
from fedrepro.fl.aggregate import weighted_average
from fedrepro.fl.device import pick_device
from fedrepro.fl.optim import SGD
from fedrepro.fl.precision import Precision
from fedrepro.fl.runner import run_seeds
from fedrepro.fl.sampling import clients_per_round, sample_clients
from fedrepro.fl.transport import Wire
from fedrepro.models import build_model


class FedAvg:
    def __init__(self, spec: dict, data, clients: list[np.ndarray], seed: int, device: torch.device):
        self.spec, self.data, self.device = spec, data, device
        self.clients = clients
        self.sizes = np.array([len(c) for c in clients], dtype=np.float64)
        self.per_round = clients_per_round(len(clients), spec["participation"])
        self.rng = np.random.default_rng(seed)
        self.batches = ClientBatches(clients, seed + 1)
        self.precision = Precision.from_spec(spec)
        self.model = self.new_model()
        self.wire = Wire(record=False)

    def new_model(self) -> torch.nn.Module:
        model = build_model(self.spec["model"], **self.spec.get("model_options", {})).to(self.device)
        return self.precision.prepare(model)

    def round(self, t: int) -> dict:
        self.wire.round = t
        chosen = sample_clients(self.rng, len(self.clients), self.per_round)
        global_params = batched.parameters_of(self.model)
        received = [self.wire.send("server", f"client{c}", "weights", global_params) for c in chosen]
        updates, losses = self._local_training(chosen, received)
        uploaded = [self.wire.send(f"client{c}", "server", "weights", u) for c, u in zip(chosen, updates)]
        weights = self.sizes[chosen] if self.spec.get("weighting", "size") == "size" else None
        self.model.load_state_dict(weighted_average(uploaded, weights), strict=False)
        return {"train_loss": float(np.mean(losses)), "clients": len(chosen)}

    def _local_training(self, chosen: np.ndarray, received: list[dict]) -> tuple[list[dict], list[float]]:
        if self.spec.get("batched", True):
            return self._batched_training(chosen, received[0])
        return self._loop_training(chosen, received)

    def _batched_training(self, chosen, start_params):
        steps, size = self.spec["local_steps"], self.spec["batch_size"]
        index = torch.as_tensor(
            np.stack([self.batches.stacked(chosen, size) for _ in range(steps)]), device=self.device
        )
        x, y = self.data.x_train, self.data.y_train
        params = batched.broadcast(start_params, len(chosen))
        params, losses = batched.local_sgd(
            batched.cross_entropy_loss(self.model, self.precision),
            params,
            lambda s: (x[index[s]], y[index[s]]),
            steps,
            self.spec["lr"],
            self.spec.get("momentum", 0.0),
            self.spec.get("weight_decay", 0.0),
        )
        updates = [{name: p[i] for name, p in params.items()} for i in range(len(chosen))]
        return updates, losses.tolist()

    def _loop_training(self, chosen, received):
        steps, size = self.spec["local_steps"], self.spec["batch_size"]
        indices = [self.batches.stacked(chosen, size) for _ in range(steps)]
        updates, losses = [], []
        for k, params in enumerate(received):
            model = self.new_model()
            model.load_state_dict(params, strict=False)
            optimiser = SGD(
                model.parameters(),
                lr=self.spec["lr"],
                momentum=self.spec.get("momentum", 0.0),
                weight_decay=self.spec.get("weight_decay", 0.0),
            )
            total = 0.0
            for step in range(steps):
                batch = torch.as_tensor(indices[step][k], device=self.device)
                loss = F.cross_entropy(
                    self.precision.forward(model, self.data.x_train[batch]), self.data.y_train[batch]
                )
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                total += loss.item()
            updates.append(batched.parameters_of(model))
            losses.append(total / steps)
        return updates, losses

    def evaluate(self, t: int) -> dict:
        return evaluate_classifier(self.model, self.data.x_test, self.data.y_test)

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "rng": self.rng.bit_generator.state,
            "batches": self.batches.state_dict(),
            "wire": self.wire.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.rng.bit_generator.state = state["rng"]
        self.batches.load_state_dict(state["batches"])
        self.wire.load_state_dict(state["wire"])

    def summary(self) -> dict:
        chance = majority_rate(self.data.y_test.cpu().numpy())
        final = self.evaluate(-1)["test_acc"]
        return {
            "uplink_bytes": self.wire.bytes_by_direction["up"],
            "downlink_bytes": self.wire.bytes_by_direction["down"],
            "chance_acc": chance,
            **check_chance(final, chance, len(self.data.y_test)).as_dict(),
        }


def run_job(job) -> None:
    """Pipeline entry: inputs `data` (prepared folder) and `partition`; outputs metrics and summary."""
    device = pick_device(job.spec.get("device", "auto"))
    data = to_tensors(load_prepared(Path(job.input["data"]).parent), device)
    clients = load_partition(job.input["partition"]).clients
    run_seeds(
        job,
        lambda seed: FedAvg(job.spec, data, clients, seed, device),
        job.spec["rounds"],
        eval_every=job.spec.get("eval_every", 1),
    )
