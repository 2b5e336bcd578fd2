"""The audit job: every configured mechanism's audit (rules `audit` and `audit_full`, via `fedrepro.report.audit`)."""

from __future__ import annotations

from fedrepro.audit.common import Audited
from fedrepro.audit.dpzv import dpzv_audits, dpzv_baseline_audits, vfl_table_init_audit
from fedrepro.audit.fedsc import fedsc_scores, fedsc_weights_audit
from fedrepro.audit.steffle import ling_scores, steffle_scores, tran_scores


def audits(spec: dict) -> list[Audited]:
    """Every configured mechanism's audit at this level's number of runs."""
    runs, seed = spec["runs"], int(spec["seed"])
    done = []
    if runs.get("fedsc"):
        done.append(fedsc_scores(spec["fedsc"], int(runs["fedsc"]), seed))
    if runs.get("fedsc_weights"):
        done.append(fedsc_weights_audit(spec["fedsc"], int(runs["fedsc_weights"]), seed))
    if runs.get("dpzv"):
        done += dpzv_audits(spec["dpzv"], int(runs["dpzv"]), seed)
        if spec["dpzv"].get("baselines"):
            done += dpzv_baseline_audits(spec["dpzv"], int(runs["dpzv"]), seed)
    if runs.get("vfl_table_init"):
        done.append(vfl_table_init_audit(spec["dpzv"], int(runs["vfl_table_init"]), seed))
    if runs.get("steffle"):
        done.append(steffle_scores(spec["steffle"], int(runs["steffle"]), seed))
    if runs.get("dp_fermi"):
        done.append(steffle_scores(spec["steffle"], int(runs["dp_fermi"]), seed, central=True))
    if runs.get("tran"):
        done.append(tran_scores(spec["tran"], int(runs["tran"]), seed))
    if runs.get("ling"):
        done.append(ling_scores(spec["ling"], int(runs["ling"]), seed))
    return done
