"""What the DP-and-fair baselines of the SteFFLe figures share (`tran2021.py`, `ling2024.py`).

Both train binary logistic regression as one vectorised program over seeds x
settings (`base.GridTrainer`) and promote the same fairness notion as the
panel: demographic parity (one stratum) or equalized odds (strata = labels).
For a sample in cell (z, a) (stratum z, sensitive group a) the group rates are
r_{za} = E[sigma(theta^T x) | z, a] and r_z = E[sigma | z]; the gradient of a
function of the rates is a per-sample sum with coefficient
kappa[z, a] = A[z, a] / P(z, a) - sum_b A[z, b] / P(z)  (`cell_coef`), so each
sample's gradient is kappa sigma(1 - sigma) x and can be clipped per sample.
P(z, a) are the public attribute frequencies, as SteFFLe's P_S.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import FairData, ScheduleConfig, strata


@dataclass
class BaselineConfig(ScheduleConfig):
    clip_primal: float = 10.0  # Tran: C_p
    alpha: float = 0.0  # Tran: constraint slack
    clip_loss: float = 1.0  # Ling: C1
    clip_fair: float = 1.0  # Ling: C2
    dp_norm: float = 1.0  # FedFDP: C, clip of the reweighted per-sample gradient
    clip_norm_for_loss: float = 1.0  # FedFDP: first clip B of the released per-sample losses

    positive = ("eta_theta", "clip_primal", "clip_loss", "clip_fair", "dp_norm", "clip_norm_for_loss")


class CellMixin:
    """Cells (stratum, group), their public frequencies and the per-sample coefficient map."""

    def _setup_cells(self, data: FairData, fairness: str):
        self.Z, z = strata(data, fairness)
        self.C = self.Z * data.k
        self.cells_of = z * data.k + data.s
        counts = torch.bincount(self.cells_of, minlength=self.C).float()
        if (counts == 0).any():
            raise ValueError(f"every (stratum, group) cell needs samples; counts = {counts.tolist()}")
        self.cell_counts = counts
        self.p_cell = (counts / counts.sum()).view(self.Z, data.k)  # P(z, a)
        self.p_stratum = self.p_cell.sum(-1, keepdim=True)  # P(z)

    def cell_coef(self, A: torch.Tensor) -> torch.Tensor:
        """kappa[z, a] = A[z, a]/P(z, a) - sum_b A[z, b]/P(z), flattened to (..., C)."""
        kappa = A / self.p_cell - (A / self.p_stratum).sum(-1, keepdim=True)
        return kappa.flatten(-2)

    def per_sample(self, kappa: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
        """kappa[cell_i] for every sample: (S, G, C) x (S, N, m) -> (S, G, N, m)."""
        S_, N, m = cell.shape
        out = torch.gather(kappa, 2, cell.reshape(S_, 1, -1).expand(-1, kappa.shape[1], -1))
        return out.view(S_, -1, N, m)


def config(spec: dict) -> BaselineConfig:
    return BaselineConfig(fairness=spec["fairness"], **spec["train"])
