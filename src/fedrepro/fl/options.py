"""Config keys of `fedrepro.fl.precision` and their defaults (the papers' own setting).

Torch-free, so the planners read the defaults without importing the training code.
"""

TRAINING_DEFAULTS = {"precision": "fp32", "channels_last": False, "compile": False}

# The top-level config key `deterministic`, handed to each job's process by
# `fedrepro.pipeline.run_snakemake_job` in this environment variable and applied by
# `fedrepro.fl.device.pick_device`. Not part of any spec: on a CPU it changes no number.
DETERMINISTIC_ENV = "FEDREPRO_DETERMINISTIC"
