"""Differential-privacy building blocks shared by the four papers.

The math lives in pure functions (floats and numpy in, floats out) so that it
is testable without any model; only ``mechanisms`` imports torch.

Modules (import the one you need; this package imports nothing):

* ``mechanisms``: per-row L2 clipping (NormClip), scalar clipping and seeded
  Gaussian noise (torch).
* ``accountant``: the independent numerical accountant (Google dp-accounting,
  RDP or PLD) for a composed, optionally Poisson-subsampled Gaussian mechanism
  (``GaussianComposition``); ``tight_epsilon`` is a run's realised PLD epsilon.
  It knows no paper: each paper's module expresses its mechanism in its terms.
* One module per paper, each with the paper's formula, its calibration and its
  accountant adapter:
  ``fedsc`` (Proposition 6.6, RDP of the DP-CalR Gaussian mechanism, sigma for a
  target epsilon, partial participation), ``dpzv`` (Gaussian DP, eq. 11 and
  Theorem 6.1, the CLT diagnostic, the embedding noise of the baselines and the
  privacy fields every run records), ``steffle`` (Theorem 3.3's sigma_w and
  sigma_theta, their preconditions, rho, delta = 1/n^2, and the calibration of
  the baselines' multipliers).
* ``checks``: the argument checks the paper modules share (each error names its argument).
* ``audit``: the empirical canary audit (Clopper-Pearson lower bounds on eps).
"""
