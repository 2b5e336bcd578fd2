"""Config keys of `fedrepro.fl.precision` and their defaults (the papers' own setting).

Torch-free, so the planners read the defaults without importing the training code.
"""

TRAINING_DEFAULTS = {"precision": "fp32", "channels_last": False, "compile": False}
