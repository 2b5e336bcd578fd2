"""FedAL (Han, Shi, Huang; arXiv:2311.16584): black-box federated distillation with a
server discriminator and less-forgetting terms, its ablations and its baselines.

Modules: kd (temperature softmax, KL/KD, less-forgetting and baseline loss terms),
discriminator, server (sees only logits), client, base (the shared `Federation`),
fedal (FedAL and its ablations FedMD-LF and FedMD), fedproto, cfd, fccl (FCCL, FCCL+),
fd, fedavg, feddf (FedDF, FedDF-AL), diagnostics (Fig. 6), jobs (pipeline plumbing).
Nothing heavy is imported here.

`METHODS` is the method table, in the order the planner lists runs. Traits:
* `adversarial`: its runs carry the server discriminator's settings (FedAL only while `use_al`);
* `ablation`: FedAL with a term switched off (the rows of Table VIII besides FedAL);
* `baseline`: a method FedAL is compared against (Sec. VI-A);
* `one_architecture` / `two_architectures`: what its client-model pool must hold.
"""

from fedrepro.algorithms import Method

_MODULE = "fedrepro.algorithms.fedal"


def _row(module: str, label: str, traits: set[str], keys: tuple[str, ...]) -> Method:
    return Method(f"{_MODULE}.{module}:run_job", label, frozenset(traits), ("tau", "lr", *keys))


METHODS = {
    "fedal": _row("fedal", "FedAL", {"adversarial"}, ("use_al", "use_lf", "batched")),
    "fedmd_lf": _row("fedal", "FedMD-LF", {"ablation"}, ("batched",)),
    "fedmd": _row("fedal", "FedMD", {"ablation", "baseline"}, ("batched",)),
    "fedproto": _row("fedproto", "FedProto", {"baseline"}, ("proto_weight", "variant", "prototype_average", "batched")),
    "cfd": _row("cfd", "CFD", {"baseline"}, ("server_model", "server_lr", "batched")),
    "fccl": _row("fccl", "FCCL", {"baseline"}, ("pretrain_iters", "local_steps", "batched")),
    "fccl_plus": _row(
        "fccl",
        "FCCL+",
        {"baseline"},
        ("similarity_temperature", "similarity_weight", "nt_temperature", "local_steps", "batched"),
    ),
    "fd": _row("fd", "FD", {"baseline"}, ("fd_weight", "batched")),
    "fedavg": _row("fedavg", "FedAvg", {"baseline", "one_architecture"}, ("batched",)),
    "feddf": _row("feddf", "FedDF", {"baseline"}, ("server_lr", "batched")),
    "feddf_al": _row("feddf", "FedDF-AL", {"adversarial", "two_architectures"}, ("server_lr", "use_lf", "batched")),
}
