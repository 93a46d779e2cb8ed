"""The benchmarks of scrun-py: `python bench/run.py` (or `python -m bench.run`) for the
tables of docs/performance.md, `python bench/timeline.py` for one container's phases.

One module per bench: floors (the main table's rows against crun and srun), engines
(podman/docker `run --rm` and `docker exec`, with the staging cache), versus (side by
side with Slurm's own scrun), load (lifecycles counted for failures and hangs,
concurrent runs), memory (per anchor), backends (the Slurm backends), targets; common
holds the environment and the bounded process calls, stats the timing, statistics and
the tables.
"""
