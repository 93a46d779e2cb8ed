"""scrun-py: an OCI runtime proxy that runs containers as Slurm jobs."""

__version__ = "0.1.0"
OCI_SPEC_VERSION = "1.0.2"


def version_text() -> str:
    """runc-style three lines (go-runc's parser expects `commit:` and `spec:`)."""
    return f"scrun-py version {__version__}\ncommit: v{__version__}\nspec: {OCI_SPEC_VERSION}"
