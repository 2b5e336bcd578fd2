# Two entry points for a fresh machine (Python 3.11): `make reproduce` and `make test` (+ `make smoke`).
# Both create .venv and install everything from this repository's own files first.
# `make lint` runs the checks CI runs before the tests (the same as .pre-commit-config.yaml).
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: install reproduce test lint bench catalog-test

# Byte code: every Python process below reads and writes its compiled modules under the venv, also where
# PYTHONDONTWRITEBYTECODE is set (CI images): a job's imports take half the CPU time uncompiled
# (src/fedrepro/bytecode.py, which the Snakefile calls for its jobs; the same folder).
export PYTHONPYCACHEPREFIX ?= $(abspath $(VENV))/pycache
unexport PYTHONDONTWRITEBYTECODE

# --no-compile: pip byte-compiles every file it installs (16,000, 84 of the install's 165 CPU-s, measured
# 2026-11-26); Python compiles and caches the few thousand that are imported, on first import.
install: $(VENV)/.installed

# constraints.txt: the versions the stored default-run record was made with (pip freeze of that venv).
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -c constraints.txt torch==2.14.1 torchvision==0.29.1
	$(BIN)/python -m pip install --quiet --no-compile -c constraints.txt -e ".[test,lint,bert]"
	touch $@

reproduce: install
	$(BIN)/snakemake --profile profiles/local

# Every test but the paper-scale smoke test (`make smoke`), on two pytest-xdist workers, one test
# file at a time each, in tests/conftest.py's order (the longest files first).
# --durations: the 30 slowest tests end the log, so every run says where the suite's time goes.
test: install
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=30 -m "not paperscale"

# The workflow catalog's test configuration (.test/config.yaml: the FedAvg chain, one seed) built whole, and
# its HTML report, as the catalog runs them; results and report.html land in .test/ (15 s on 2 cores).
catalog-test: install
	$(BIN)/snakemake -c2 -d .test
	$(BIN)/snakemake -d .test --report report.html

# ruff and snakefmt settings: pyproject.toml. `snakemake --lint` only parses the workflow; its
# results folder is a name under .snakemake/ so that linting never touches results/.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check workflow
	$(BIN)/snakemake --lint --config results=.snakemake/lint-results

# The paper-scale smoke test: every paper-scale rule through Snakemake on tiny generated real-format
# data (tests/paperscale/test_smoke.py; not part of `make test`; CI runs both).
.PHONY: smoke
smoke: install
	$(BIN)/python -m pytest -s -m paperscale tests/paperscale   # -s: the run prints its minutes and log

# Speed benchmarks (not tests): results/benchmarks/summary.md. About 16 min on 2 cores; docs/benchmarks.md.
bench: install
	$(BIN)/python benchmarks/run.py

# The cost planner's table on a GPU (docs/benchmarks.md, "make bench-costs"): times the rows that decide the
# paper-scale hours and have no measurement of today's code (paper_scale.py DECIDING: FedSC fp32 and bf16,
# FedAL's stacked pool, Amazon), replacing those rows of benchmarks/unit_costs.csv, within 10 minutes on an
# H200; it lists each row and the command that fills it first. Without a GPU it lists them and writes nothing.
# Every pool's kind: benchmarks/paper_scale.py --costs --all (20 minutes).
.PHONY: bench-costs
bench-costs: install
	$(BIN)/python benchmarks/paper_scale.py --costs

# Empirical privacy audit at full n (results/privacy/audit_full.{csv,md}; config.yaml audit.runs.full);
# tens of CPU-minutes. The default run builds the small-n version (results/privacy/audit.md).
.PHONY: audit
audit: install
	$(BIN)/snakemake -c1 audit_full

# Mutation testing (not part of `make test`): each module of algorithms/, privacy/, fl/, eval/ against
# its own tests, in a scratch copy; updates the table in docs/testing.md. Hours for all modules on
# 2 cores; one module: make mutate MODULE=algorithms/dpzv. MUTATE_BUDGET: minutes per module;
# MUTATE_SAMPLE: mutants per module (a seeded random sample; 0 = all of them).
.PHONY: mutate
MODULE ?=
MUTATE_BUDGET ?= 20
MUTATE_SAMPLE ?= 200
mutate: install
	$(BIN)/python -m pip install --quiet -e ".[test,mutate]"
	$(BIN)/python tools/mutate.py $(if $(MODULE),--module $(MODULE)) --budget-min $(MUTATE_BUDGET) --sample $(MUTATE_SAMPLE)
