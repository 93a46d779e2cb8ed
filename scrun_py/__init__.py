"""scrun-py: an OCI runtime proxy that runs containers as Slurm jobs."""

# The one source of the version: pyproject.toml reads it ([tool.setuptools.dynamic]).
__version__ = "0.2.0"
OCI_SPEC_VERSION = "1.0.2"
