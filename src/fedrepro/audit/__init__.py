"""The empirical privacy audit (the job: `job.audits`): each paper's private mechanism run through its own class.

For every mechanism the job runs a small world many times without ("out") and with ("in") one canary,
and an attacker who knows everything but the noise scores each run with the Gaussian log-likelihood
ratio of what it observes (it replays the run in both worlds, noise switched off, to get the noiseless
release of each step). `fedrepro.privacy.audit` turns the scores into a lower bound on epsilon and the
audit's power; `fedrepro.report.audit` writes the table. The settings are the `audit:` block of
config.yaml.

Every attacker here knows the schedule (who takes part when, which samples are in which batch), so the
epsilon it is compared with is the one for that adversary: the releases that held the canary, each a
full Gaussian, no subsampling amplification (`common.Audited.eps_adversary`). A label computed for another
adversary (DPZV's Poisson amplification at q = B/D) is printed beside it, never compared with it.

One module per paper (`fedsc`, `dpzv`, `steffle`: SteFFLe, DP-FERMI, Tran et al., Ling et al.), what they
share in `common`. Nothing here imports torch at module level: `fedrepro.config` reads `dpzv.check` while
Snakemake parses.
"""
