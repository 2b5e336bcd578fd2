"""fedrepro: reproduce private and heterogeneous federated learning papers.

Importing the package is cheap: torch and friends are imported only by the
modules that use them, so the Snakefile and the planners stay fast.
"""

__version__ = "0.1.0"
