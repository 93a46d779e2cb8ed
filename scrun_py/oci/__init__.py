"""OCI bundle (config.json) and OCI state document."""
