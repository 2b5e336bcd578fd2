"""The network between clients and server, made explicit.

Everything that crosses it goes through `Wire.send`, which hands the receiver a
detached copy and records who sent what. Tests assert on `wire.messages` that a
server only ever received what its paper says it receives, and reports count
communication volume exactly from the same log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Message:
    round: int
    sender: str
    receiver: str
    kind: str
    numel: int
    nbytes: int


def _copy(payload):
    if isinstance(payload, torch.Tensor):
        return payload.detach().clone()
    if isinstance(payload, Mapping):
        return {key: _copy(value) for key, value in payload.items()}
    if isinstance(payload, (list, tuple)):
        return type(payload)(_copy(value) for value in payload)
    if isinstance(payload, (int, float)):
        return payload
    raise TypeError(
        f"cannot send a {type(payload).__name__} over the wire; send tensors, numbers or dicts/lists of them"
    )


def _size(payload) -> tuple[int, int]:
    if isinstance(payload, torch.Tensor):
        return payload.numel(), payload.numel() * payload.element_size()
    if isinstance(payload, Mapping):
        payload = list(payload.values())
    if isinstance(payload, (list, tuple)):
        sizes = [_size(value) for value in payload]
        return sum(s[0] for s in sizes), sum(s[1] for s in sizes)
    return 1, 8


class Wire:
    """Records every message; `record=False` keeps only the byte counters (long runs)."""

    def __init__(self, record: bool = True):
        self.record = record
        self.round = 0
        self.messages: list[Message] = []
        self.bytes_by_direction = {"up": 0, "down": 0}

    def send(self, sender: str, receiver: str, kind: str, payload):
        self.log(sender, receiver, kind, payload)
        return _copy(payload)

    def log(self, sender: str, receiver: str, kind: str, payload) -> None:
        """The record of a message (bytes, and the message when `record`), without carrying it: for a step that
        carries its messages itself (`carry`) and is logged after it, so the step reads no host counter (a step
        compiled or captured as a graph would be traced again whenever a counter it reads changed)."""
        numel, nbytes = _size(payload)
        direction = "up" if receiver == "server" else "down"
        self.bytes_by_direction[direction] += nbytes
        if self.record:
            self.messages.append(Message(self.round, sender, receiver, kind, numel, nbytes))

    @staticmethod
    def carry(payload):
        """What `send` delivers (a copy), unlogged: the caller logs it (`log`)."""
        return _copy(payload)

    def kinds(self, receiver: str) -> set[str]:
        """The kinds of message that `receiver` was ever sent."""
        return {m.kind for m in self.messages if m.receiver == receiver}

    def state_dict(self) -> dict:
        return {"round": self.round, "bytes": dict(self.bytes_by_direction)}

    def load_state_dict(self, state: dict) -> None:
        self.round = state["round"]
        self.bytes_by_direction = dict(state["bytes"])
