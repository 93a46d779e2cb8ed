"""The command line: the click-free parser (fast_path), the flag table it reads
(argv_table, generated from base/flags.py by argv_table_gen), the click layer for
everything else (click_app), and the one fatal path both end in (fatal).  Only entry.py
and `python -m scrun_py` import this package; nothing else in scrun_py may.  It may
import any other package.
"""
