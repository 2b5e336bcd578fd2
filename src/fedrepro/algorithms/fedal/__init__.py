"""FedAL (Han, Shi, Huang; arXiv:2311.16584): black-box federated distillation with a
server discriminator and less-forgetting terms, its ablations and its baselines.

Modules: kd (temperature softmax, KL/KD, less-forgetting and baseline loss terms),
discriminator, server (sees only logits), client, federation (shared base),
distill (FedAL / FedMD-LF / FedMD), fedproto, cfd, fccl (FCCL, FCCL+), fd,
fedavg, feddf (FedDF, FedDF-AL), diagnostics (Fig. 6), optim (a plain Adam), jobs
(pipeline plumbing).
Nothing heavy is imported here.
"""

METHODS = {
    "fedal": "fedrepro.algorithms.fedal.distill:run_job",
    "fedmd_lf": "fedrepro.algorithms.fedal.distill:run_job",
    "fedmd": "fedrepro.algorithms.fedal.distill:run_job",
    "fedproto": "fedrepro.algorithms.fedal.fedproto:run_job",
    "cfd": "fedrepro.algorithms.fedal.cfd:run_job",
    "fccl": "fedrepro.algorithms.fedal.fccl:run_job",
    "fccl_plus": "fedrepro.algorithms.fedal.fccl:run_job",
    "fd": "fedrepro.algorithms.fedal.fd:run_job",
    "fedavg": "fedrepro.algorithms.fedal.fedavg:run_job",
    "feddf": "fedrepro.algorithms.fedal.feddf:run_job",
    "feddf_al": "fedrepro.algorithms.fedal.feddf:run_job",
}
