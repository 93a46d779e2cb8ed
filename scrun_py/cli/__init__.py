"""The command line: the click-free parser with the one fatal path (fast_path), the flag
table it reads (argv_table, generated from base/flags.py by argv_table_gen) and the
click layer for everything else (click_app).  Only entry.py and `python -m scrun_py`
import this package; nothing else in scrun_py may.  It may import any other package.
"""
