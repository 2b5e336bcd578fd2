"""Top-level config keys shared by the planners, the pipeline bridge and the training loop: the keys of
`fedrepro.fl.precision` with their defaults (the papers' own setting), and the environment variables that
hand the keys changing no number to a job's process.

Torch-free and importing nothing, so every layer reads them without importing the training code.
"""

TRAINING_DEFAULTS = {"precision": "fp32", "channels_last": False, "compile": False}

# The top-level config key `deterministic`, handed to each job's process by
# `fedrepro.pipeline.run_snakemake_job` in this environment variable and applied by
# `fedrepro.fl.device.pick_device`. Not part of any spec: on a CPU it changes no number.
DETERMINISTIC_ENV = "FEDREPRO_DETERMINISTIC"

# The top-level config keys `checkpoint_every` (rounds of fedrepro.fl.loop between checkpoints) and
# `checkpoint_minutes` (the wall-time policy on top), handed over the same way and read by
# `fedrepro.fl.loop.Checkpoint`: how often a run is saved changes none of its numbers, so changing
# either re-runs no job, empties no scratch folder and keeps every finished seed.
EVERY_ENV = "FEDREPRO_CHECKPOINT_EVERY"
MINUTES_ENV = "FEDREPRO_CHECKPOINT_MINUTES"
