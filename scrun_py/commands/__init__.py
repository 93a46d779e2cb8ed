"""One module per OCI verb; each exposes `run(inv, ...)`."""
