"""How many clients take part in a FedSC round (pure Python: the planner and the jobs share it).

The authors' code samples max(int(p J), 2) clients for partial participation (2/5, 2/10, 4/20 in
Table 2). It truncates p J, unlike `fedrepro.fl.sampling.clients_per_round`, which rounds it.
"""

from __future__ import annotations


def clients_per_round(num_clients: int, participation) -> int:
    """'full', a fraction in (0, 1] or a count; a fraction gives max(int(p J), 2) (at most J)."""
    if participation == "full":
        return num_clients
    if isinstance(participation, float) and 0 < participation <= 1:
        return max(int(participation * num_clients), min(2, num_clients))
    if isinstance(participation, int) and participation >= 1:
        return min(participation, num_clients)
    raise ValueError(f"participation must be 'full', a fraction in (0, 1] or a count >= 1, got {participation!r}")
