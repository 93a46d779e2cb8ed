"""`python -m scrun_py` is the same as the `scrun-py` console script."""

from scrun_py.entry import main

main()
