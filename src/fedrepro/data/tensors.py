"""Prepared arrays as model-ready tensors, kept whole on the device.

Small in-memory data sets are indexed directly on the device each step, which
avoids a DataLoader's per-batch worker and collation overhead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class TensorData:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int


def standardise_images(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images to float32 in [0, 1], then per-channel z-score with training statistics."""
    train = x_train.astype(np.float32) / 255.0
    test = x_test.astype(np.float32) / 255.0
    axes = tuple(i for i in range(train.ndim) if i != train.ndim - 3)  # every axis but the channel
    mean = train.mean(axis=axes, keepdims=True)
    std = train.std(axis=axes, keepdims=True) + 1e-6
    return (train - mean) / std, (test - mean) / std


def to_tensors(prepared, device: torch.device | str = "cpu") -> TensorData:
    """Images are standardised; tabular features are used as prepared (already z-scored)."""
    x_train, x_test = prepared.x_train, prepared.x_test
    if prepared.meta["kind"] in ("image", "multiview"):
        x_train, x_test = standardise_images(x_train, x_test)
    as_tensor = lambda a, dtype: torch.as_tensor(np.ascontiguousarray(a), dtype=dtype, device=device)  # noqa: E731
    x_dtype = torch.long if prepared.meta["kind"] == "text" else torch.float32
    return TensorData(as_tensor(x_train, x_dtype), as_tensor(prepared.y_train, torch.long),
                      as_tensor(x_test, x_dtype), as_tensor(prepared.y_test, torch.long),
                      int(prepared.meta["num_classes"]))


class ClientBatches:
    """Per-client streams of mini-batch indices: shuffle, walk, reshuffle when exhausted.

    All clients draw the same batch size, so the batches of many clients stack
    into one (clients, batch) index tensor for batched training. A client with
    fewer samples than the batch size repeats samples within a batch.
    """

    def __init__(self, client_indices: list[np.ndarray], seed: int):
        self.clients = [np.asarray(c, dtype=np.int64) for c in client_indices]
        self.rng = np.random.default_rng(seed)
        self.orders = [self.rng.permutation(c) for c in self.clients]
        self.positions = [0] * len(self.clients)

    def next(self, client: int, batch_size: int) -> np.ndarray:
        taken: list[np.ndarray] = []
        need = batch_size
        while need > 0:
            order, pos = self.orders[client], self.positions[client]
            chunk = order[pos : pos + need]
            taken.append(chunk)
            need -= len(chunk)
            self.positions[client] = pos + len(chunk)
            if self.positions[client] >= len(order):
                self.orders[client] = self.rng.permutation(self.clients[client])
                self.positions[client] = 0
        return np.concatenate(taken)

    def stacked(self, clients: np.ndarray, batch_size: int) -> np.ndarray:
        """A (len(clients), batch_size) array of training-set indices."""
        return np.stack([self.next(int(c), batch_size) for c in clients])

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "orders": self.orders, "positions": self.positions}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.orders = [np.asarray(o) for o in state["orders"]]
        self.positions = list(state["positions"])
