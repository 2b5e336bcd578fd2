"""GPU levers the planner prices beside today's code (`python -m fedrepro.plan`, column "with levers").

A lever is a change of how a unit runs on a GPU that changes no number the run produces: each names the
work it speeds up (the FLOPs a precision path runs, `Work.autocast_flops`, or the launches of a round or
step ready for CUDA graphs, `Work.graphed_launches`), the runs it applies to, its assumed speed-up and
where that comes from (a measured row, a published number, a stated assumption), and the CPU tests that
show it leaves the numbers alone. A lever whose test files are not in the checkout, or whose gate failed
(bf16 zeroth-order differences), is listed and not applied.

The column prices a job at today's seconds per unit times lever model / today's model of its unit (the
same constants, so a unit priced from a measured row keeps that row's anchor).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fedrepro.experiments.cost import Constants, Work

REPO = Path(__file__).resolve().parents[3]

# FedSC training step of the paper's encoder (Fixup ResNet-20x8, batch 512) on an H200, issue 20:
# fp32 eager 107.7 ms, bf16 autocast + channels-last 36.3 ms (docs/benchmarks.md, "Issue 20").
FEDSC_BF16_SPEEDUP = 107.7 / 36.3
# A kernel replayed from a CUDA graph costs its GPU time, not the host's dispatch (the fitted
# seconds_per_launch, about 38 us): a short kernel runs a few microseconds. Stated assumption, 4 us per
# kernel (NVIDIA Technical Blog, "Getting Started with CUDA Graphs", 2019: a short kernel of about 3 us
# back to back from a graph); `make bench-costs` has no row for it yet.
GRAPH_SECONDS_PER_KERNEL = 4e-6
# Eager steps to capture one graph, each at the fitted launch cost: a warm-up step (torch.cuda.graphs' documented
# pattern warms up on a side stream before capturing) and the capture itself (the host launches every kernel once).
# How many graphs a run captures is the planner's (`Work.capture_launches`): one per step form and batch shape.
CAPTURE_PASSES = 2
# tests/dpzv/test_zo_bf16.py: relative RMS error of DPZV's two-point differences with bf16 forwards (the
# server's losses in fp32) against fp32 at lambda = 1e-3 on a small random BERT, and the lever's threshold.
ZO_BF16_THRESHOLD = 0.10
ZO_BF16_MEASURED = 0.045  # that test's value (seed 0, hidden 64, 8 directions x 16 samples)
# tests/dpzv/test_precision.py: the same relative RMS error, of the client updates of 8 whole rounds run with
# `precision: bf16` (fl/precision.py) against fp32 from the same start, on a small random BERT client (hidden
# 64) with the run's own server head: the Deltas the server computes from the sent embeddings.
ZO_BF16_ROUND_MEASURED = {"dpzv": 0.111, "zoo_vfl": 0.113}
ZO_BF16_PASSES = max(ZO_BF16_MEASURED, *ZO_BF16_ROUND_MEASURED.values()) <= ZO_BF16_THRESHOLD
# BERT's forwards are matmuls: the H200's dense bf16 tensor-core peak over its dense TF32 peak (datasheet,
# nvidia.com/en-us/data-center/h200: 1,979 / 989 TFLOPS with sparsity), 2x; fp32 without TF32 would gain more.
BERT_BF16_SPEEDUP = 1979 / 989
GRAPH_SOURCE = "assumption: a replayed kernel costs 4 us of GPU time instead of the fitted dispatch cost"
DPZV_GRAPHS, FEDAL_GRAPHS = "tests/dpzv/test_graph_ready.py", "tests/fedal/test_graph_ready.py"
FEDSC_GRAPHS = "tests/fedsc/test_graph_ready.py"
FEDAL_BASELINE_GRAPHS = "tests/fedal/test_baselines_graph_ready.py"
CAPTURABLE = "tests/foundation/test_capturable_optim.py"  # SGD's and Adam's per-step scalars on the device
ADAM_CAPTURED_ONCE = (
    f"{CAPTURABLE}::test_the_device_step_count_adam_is_bit_identical_to_the_host_count",
    f"{CAPTURABLE}::test_a_step_is_captured_once_across_steps_and_rounds",
    f"{CAPTURABLE}::test_a_stack_copies_its_step_count_to_the_clients_adams",
)
DPZV_PRECISION = "tests/dpzv/test_precision.py"


@dataclass(frozen=True)
class Lever:
    name: str
    paper: str
    methods: tuple[str, ...] | None  # None: every method of the paper
    kind: str  # "flops": `autocast_flops` run `value` times faster; "launches": `graphed_launches` at `value` s each
    value: float
    source: str
    evidence: tuple[str, ...]  # CPU tests (path or path::test) showing it changes no number
    gate: bool = True  # a condition measured by a test (bf16 zeroth-order differences)

    def missing_evidence(self, repo: Path = REPO) -> list[str]:
        """The evidence entries not found in the checkout (file absent, or no such test in it)."""
        missing = []
        for entry in self.evidence:
            path, _, test = entry.partition("::")
            file = repo / path
            if not file.exists() or (test and not re.search(rf"^def {re.escape(test)}\(", file.read_text(), re.M)):
                missing.append(entry)
        return missing

    def applied(self, repo: Path = REPO) -> bool:
        return self.gate and not self.missing_evidence(repo)

    def covers(self, paper: str, method: str) -> bool:
        return paper == self.paper and (self.methods is None or method in self.methods)


LEVERS = (
    Lever(
        "bf16 autocast + channels-last, FedSC training",
        "fedsc",
        None,
        "flops",
        FEDSC_BF16_SPEEDUP,
        "measured: H200 FedSC step, fp32 eager 107.7 ms vs bf16 + channels-last 36.3 ms (issue 20)",
        (
            "tests/foundation/test_levers.py::test_fedsc_bf16_channels_last_update_within_tolerance_of_fp32",
            "tests/fedsc/test_methods.py::test_bf16_trains_the_networks_but_dp_calr_and_the_knn_monitor_stay_fp32",
        ),
    ),
    Lever(
        "CUDA graphs, DPZV rounds (zero host syncs, one graph per client a run)",
        "dpzv",
        ("dpzv",),
        "launches",
        GRAPH_SECONDS_PER_KERNEL,
        GRAPH_SOURCE,
        (
            f"{DPZV_GRAPHS}::test_a_server_round_makes_no_host_sync",
            f"{DPZV_GRAPHS}::test_a_dpzv_round_compiles_in_one_graph_and_matches_eager",
            f"{DPZV_GRAPHS}::test_a_round_is_captured_once_per_client_over_a_run",
            "tests/foundation/test_levers.py::test_bert_client_forward_compiles_fullgraph_equal_to_eager",
        ),
    ),
    Lever(
        "CUDA graphs, ZOO-VFL, VAFL and VFL-CZOFO rounds",
        "dpzv",
        ("zoo_vfl", "vafl", "vfl_czofo"),
        "launches",
        GRAPH_SECONDS_PER_KERNEL,
        GRAPH_SOURCE,
        (
            f"{DPZV_GRAPHS}::test_a_server_round_makes_no_host_sync",
            f"{DPZV_GRAPHS}::test_a_baseline_round_compiles_in_one_graph_and_matches_eager",
            f"{DPZV_GRAPHS}::test_a_round_is_captured_once_per_client_over_a_run",
        ),
    ),
    Lever(
        "CUDA graphs, stacked FedAL steps (zero host syncs, one graph per step and form a run)",
        "fedal",
        ("fedal",),
        "launches",
        GRAPH_SECONDS_PER_KERNEL,
        GRAPH_SOURCE,
        (
            f"{FEDAL_GRAPHS}::test_a_stacked_local_step_makes_no_host_sync",
            f"{FEDAL_GRAPHS}::test_a_stacked_global_step_makes_no_host_sync",
            f"{FEDAL_GRAPHS}::test_a_stacked_local_step_compiles_in_one_graph_and_matches_eager",
            f"{FEDAL_GRAPHS}::test_a_stacked_global_step_compiles_in_one_graph_and_matches_eager",
            f"{FEDAL_GRAPHS}::test_records_are_bit_identical_to_the_host_adam_step",
            f"{FEDAL_GRAPHS}::test_a_stacked_local_step_is_captured_once_per_form_over_two_stages",
            f"{FEDAL_GRAPHS}::test_a_stacked_global_step_is_captured_once_per_form_over_two_stages",
            *ADAM_CAPTURED_ONCE,
        ),
    ),
    Lever(
        "CUDA graphs, stacked steps of FedAL's baselines and ablations (zero host syncs, one graph per step and form "
        "a run)",
        "fedal",
        # FedProto: public features only (plan.py); FedDF(-AL): the clients' steps and the teachers' forwards
        ("fedmd", "fedmd_lf", "fccl", "fccl_plus", "cfd", "fedproto", "fd", "fedavg", "feddf", "feddf_al"),
        "launches",
        GRAPH_SECONDS_PER_KERNEL,
        GRAPH_SOURCE,
        (
            f"{FEDAL_BASELINE_GRAPHS}::test_a_fedmd_stacked_local_step_makes_no_host_sync",
            f"{FEDAL_BASELINE_GRAPHS}::test_a_fedmd_stacked_global_step_makes_no_host_sync",
            f"{FEDAL_BASELINE_GRAPHS}::test_fedmd_stacked_steps_compile_in_one_graph_and_match_eager",
            f"{FEDAL_BASELINE_GRAPHS}::test_an_fccl_collaborative_step_makes_no_host_sync",
            f"{FEDAL_BASELINE_GRAPHS}::test_an_fccl_local_step_makes_no_host_sync",
            f"{FEDAL_BASELINE_GRAPHS}::test_fccl_records_are_bit_identical_to_the_host_read_round",
            f"{FEDAL_BASELINE_GRAPHS}::test_an_fccl_collaborative_step_compiles_in_one_graph_and_matches_eager",
            f"{FEDAL_BASELINE_GRAPHS}::test_an_fccl_local_step_compiles_in_one_graph_and_matches_eager",
            f"{FEDAL_BASELINE_GRAPHS}::test_a_public_kd_global_step_makes_no_host_sync",
            f"{FEDAL_BASELINE_GRAPHS}::test_a_supervised_step_makes_no_host_sync",
            f"{FEDAL_BASELINE_GRAPHS}::test_public_kd_records_are_bit_identical_to_the_host_read_round",
            f"{FEDAL_BASELINE_GRAPHS}::test_a_public_kd_global_step_compiles_in_one_graph_and_matches_eager",
            f"{FEDAL_BASELINE_GRAPHS}::test_a_supervised_step_compiles_in_one_graph_and_matches_eager",
            f"{FEDAL_BASELINE_GRAPHS}::test_off_diagonal_slicing_is_the_boolean_mask_bit_for_bit",
            f"{FEDAL_BASELINE_GRAPHS}::test_an_fd_local_step_makes_no_host_sync",
            f"{FEDAL_BASELINE_GRAPHS}::test_an_fd_local_step_compiles_in_one_graph_and_matches_eager",
            f"{FEDAL_BASELINE_GRAPHS}::test_a_fedavg_local_step_makes_no_host_sync",
            f"{FEDAL_BASELINE_GRAPHS}::test_a_feddf_ensemble_forward_makes_no_host_sync",
            f"{FEDAL_BASELINE_GRAPHS}::test_fedavg_and_feddf_steps_compile_in_one_graph_each_and_match_eager",
            f"{FEDAL_BASELINE_GRAPHS}::test_a_public_kd_global_step_is_captured_once_over_its_iterations",
            f"{FEDAL_BASELINE_GRAPHS}::test_an_fccl_collaborative_step_is_captured_once_over_its_iterations",
            *ADAM_CAPTURED_ONCE,
        ),
    ),
    Lever(
        "CUDA graphs, FedSC training step (zero host syncs, one graph per loss form and batch shape a run)",
        "fedsc",
        None,  # FedSC, FedAvg+SC, Centralized SC and the SSL baselines: one local step (base.sgd_step)
        "launches",
        GRAPH_SECONDS_PER_KERNEL,
        GRAPH_SOURCE,
        (
            f"{FEDSC_GRAPHS}::test_a_fedsc_local_step_makes_no_host_sync",
            f"{FEDSC_GRAPHS}::test_a_baseline_local_step_makes_no_host_sync",
            f"{FEDSC_GRAPHS}::test_a_client_update_makes_no_host_sync",
            f"{FEDSC_GRAPHS}::test_records_are_bit_identical_to_the_host_read_round",
            f"{FEDSC_GRAPHS}::test_a_fedsc_local_step_compiles_in_one_graph_and_matches_eager",
            f"{FEDSC_GRAPHS}::test_a_baseline_local_step_compiles_in_one_graph_and_matches_eager",
            f"{FEDSC_GRAPHS}::test_fedsc_captures_its_step_once_per_form_and_batch_shape_over_three_rounds",
            f"{FEDSC_GRAPHS}::test_a_baseline_captures_its_step_once_per_batch_shape_over_three_rounds",
            f"{CAPTURABLE}::test_a_restarted_sgd_is_bit_identical_to_a_fresh_host_sgd_each_round",
            f"{CAPTURABLE}::test_a_step_is_captured_once_across_steps_and_rounds",
            f"{CAPTURABLE}::test_the_compiled_step_gives_the_eager_parameters",
        ),
    ),
    Lever(
        "bf16 forwards, DPZV's BERT (zeroth-order differences)",
        "dpzv",
        ("dpzv", "zoo_vfl"),
        "flops",
        BERT_BF16_SPEEDUP,
        f"gate: relative error of the ZO differences in bf16, {ZO_BF16_MEASURED:.3f} (a fixed head), "
        f"{max(ZO_BF16_ROUND_MEASURED.values()):.3f} (whole rounds) {'<=' if ZO_BF16_PASSES else '>'} "
        f"{ZO_BF16_THRESHOLD:.2f}",
        (
            "tests/dpzv/test_zo_bf16.py::test_bf16_zo_difference_error_decides_the_lever",
            f"{DPZV_PRECISION}::test_bf16_runs_the_client_forwards_under_autocast_and_the_server_in_fp32",
            f"{DPZV_PRECISION}::test_a_zo_round_with_bf16_forwards_decides_the_lever",
        ),
        gate=ZO_BF16_PASSES,
    ),
    Lever(
        "bf16 autocast, VAFL's and VFL-CZOFO's BERT (client forward and backward)",
        "dpzv",
        ("vafl", "vfl_czofo"),
        "flops",
        BERT_BF16_SPEEDUP,
        "assumption: the H200's dense bf16 / TF32 tensor-core peak, 1,979 / 989 TFLOPS (datasheet, "
        "nvidia.com/en-us/data-center/h200)",
        (
            f"{DPZV_PRECISION}::test_bf16_runs_the_client_forwards_under_autocast_and_the_server_in_fp32",
            f"{DPZV_PRECISION}::test_a_first_order_round_with_bf16_updates_within_tolerance_of_fp32",
        ),
    ),
)


def active(levers=LEVERS, repo: Path = REPO) -> list[Lever]:
    """The levers applied: gate passed and every evidence test in the checkout."""
    return [lever for lever in levers if lever.applied(repo)]


def lever_seconds(constants: Constants, work: Work, levers) -> float:
    """Seconds of `work` under the additive model with `levers` (those covering its run) applied."""
    if sum(lever.kind == "flops" for lever in levers) > 1:
        raise ValueError(f"two precision levers on the same FLOPs: {[lever.name for lever in levers]}")
    flops, launches, seconds = work.flops, work.launches, 0.0
    for lever in levers:
        if lever.kind == "flops":
            flops -= work.autocast_flops
            seconds += work.autocast_flops * constants.seconds_per_flop / lever.value
        else:
            launches -= work.graphed_launches
            seconds += work.graphed_launches * lever.value
    if any(lever.kind == "launches" for lever in levers):  # the run's captures, each at eager launch cost
        launches += work.capture_launches
    return seconds + flops * constants.seconds_per_flop + launches * constants.seconds_per_launch


def ratio(constants: Constants, work: Work, paper: str, method: str, levers) -> float:
    """Lever model / today's model of one unit of a run of `method`, both additive (1 where no lever of
    `levers` covers the run)."""
    additive = Constants(constants.seconds_per_flop, constants.seconds_per_launch, constants.device)
    today = additive.seconds(work)
    covering = [lever for lever in levers if lever.covers(paper, method)]
    return lever_seconds(additive, work, covering) / today if covering and today else 1.0
