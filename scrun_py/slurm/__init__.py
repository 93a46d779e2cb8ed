"""Everything that talks to Slurm: the SCRUN_* option table, argv builders, backends."""
