"""dd-slurm: run Data Designer generation jobs against model servers on Slurm allocations."""

__version__ = "0.1.0"
