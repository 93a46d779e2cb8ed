"""The per-container anchor process: owns the control socket, the Slurm job and the step."""
