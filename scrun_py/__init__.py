"""scrun-py: an OCI runtime proxy that runs containers as Slurm jobs."""

__version__ = "0.1.0"
OCI_SPEC_VERSION = "1.0.2"
