"""The lean-import rules of scrun-py: what the hot paths may import, what the modules they
leave out would cost, and how the tests hold them.  Documentation, and the one constant
tests/unit/test_lean.py reads: no module of scrun_py imports this one (the line each
module carries points here instead).

The hot paths
-------------
The processes an engine waits for, once per container or more:

* `create` until it hands the forked anchor its spec (cli/fast_path.py, then
  commands/create.py).  It validates while the anchor imports, and the later of the two
  decides when salloc starts, so both sets of imports are on the critical path.
* the anchor until salloc runs (anchor/__main__.py `preload`, anchor/launch.py): its
  imports, loading scrun.lua, choosing the Slurm backend.  One anchor lives per
  container, so what it imports is also memory, per container.
* `start` and `kill`: one request to the anchor over its socket.
* `state` (polled) and `delete`.

All of them run without click (entry.py, cli/fast_path.py, cli/argv_table.py).
Slurm's scrun runs whole verbs in 5-16 ms (docs/performance.md).

What the modules left out cost
------------------------------
The one place these figures are written; every other module points here.  Measured on
2026-12-04 with Python 3.11.2 on the project's test machine (2 vCPUs, shared), where a
bare interpreter (`python -I -c pass`) takes 12-13 ms: each module imported alone into
a fresh interpreter (`python -I`), the median of 15, wall time of the import and the
growth of the resident set (/proc/self/statm).  Alone means with everything it imports:
in scrun-py some of that (enum, collections) may be loaded already, so the figures are
an upper bound; they scale with the machine.

    module              import   resident    what replaces it (rule below)
    typing               7.9 ms   2.0 MB     rule 1, base/records.py
    re                   5.1 ms   1.4 MB     string methods (site/oci_conf_syntax.py)
    pathlib              8.3 ms   2.1 MB     paths as strings (os.path)
    subprocess           8.9 ms   2.4 MB     base/procs.py `spawn` (os.posix_spawn)
    socket (socket.py)   5.9 ms   1.5 MB     the C module `_socket`
    signal (signal.py)   3.7 ms   1.2 MB     the C module `_signal` (base/signames.py)
    json                 6.6 ms   1.5 MB     container/fastjson.py (the C `_json`)
    dataclasses         12.3 ms   2.9 MB     base/records.py records
    tomllib             11.6 ms   2.7 MB     imported only where a scrun-py.toml exists
    importlib.metadata  27.7 ms   6.2 MB     slurm/choice.py `installed_release`
    click               23.1 ms   5.1 MB     cli/fast_path.py on the hot paths
    pydantic            30.2 ms   8.2 MB     the plain readers (oci/bundle.py,
                                             site/oci_conf_syntax.py `read_fields`)
    asyncio             33.7 ms  10.5 MB     threads (base/threads.py)
    structlog           47.3 ms  12.4 MB     base/logs.py `Logger` (structlog: asyncio)
    datetime             1.4 ms   0.8 MB     base/logs.py `rfc3339_now` (time)
    lupa                 2.8 ms   1.0 MB     (needed: the anchor runs scrun.lua)

Beyond the import: pydantic's models take tens of ms more to build, and
collections.namedtuple compiles a `__new__` from source for every record class (about
0.1 ms each, with over twenty records in the anchor), which base/records.py shares.

The rules
---------
1. **typing is not imported at run time.**  Each module writes

       TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
       if TYPE_CHECKING:
           from typing import Any

   mypy reads any name `TYPE_CHECKING` as typing's constant (true), Python never runs
   the block, and `from __future__ import annotations` keeps every annotation a string.
   `from typing import TYPE_CHECKING` would import typing itself (the table above). The
   block also holds the other imports only annotations use (pathlib's Path, `_socket`,
   the modules of other layers). `NamedTuple` and `Protocol` come from base/records.py:
   typing's NamedTuple compiles every field's annotation into a ForwardRef, and
   collections.namedtuple compiles a `__new__` from source for every record; a record
   there shares one `__new__`.

2. **A costly module is imported inside the function that needs it**, where a hot path
   does not reach that function, or replaced where it does (the table above says by
   what).  Where a replacement needs a word more:

   * re: pip's console-script wrapper imported it on every verb, hence the plain script
     bin/scrun-py; site/oci_conf_syntax.py reads oci.conf's pairs and checks its
     regular expressions by hand.
   * subprocess is imported once salloc runs, off `create`'s critical path.
   * json only words an error, or runs outside the hot paths.
   * pydantic's models only word a file that is wrong: config.json and oci.conf whose
     values already have their types are read without them.
   * base/flags.py (collections and its records) is read by `state`, `start`, `kill`
     and `delete` as literals, cli/argv_table.py.
3. **Site files cost only where they exist.**  The modules that read scrun-py.toml
   (site/site_conf.py, site/policy.py, and what site/audit.py needs to read its
   settings) are imported only when site/presence.py `site_file_may_apply` finds a
   file; pyslurm only by
   slurm/pyslurm_api.py, inside a function.

How the tests hold them
-----------------------
tests/unit/test_imports.py checks the modules loaded, never a timing (the machines are
shared and noisy):

* `TestAnchorStaysLean`: the anchor after `preload` loads none of pydantic, click,
  asyncio, structlog, dataclasses, datetime, ssl, sysconfig's data, pathlib, urllib,
  ipaddress, json, typing or socket; at the moment salloc runs, neither subprocess,
  re, shlex, locale, selectors nor socket.
* `TestCreateStaysLean`: `create`, when it hands the anchor its spec, has not loaded
  pathlib, urllib, ipaddress, pydantic, click, json, subprocess, typing, dataclasses
  or re.
* `TestSiteCorpusStaysLean`: on every oci.conf of tests/unit/site_corpus/ and the
  project's own, with and without the other site files, neither `create` nor the anchor
  loads pydantic, importlib.metadata, inspect, email or zipfile.
* `TestNoClickVerbsStayLean`: `state` and `delete` load only the modules of its ALLOWED
  set; `start` and `kill` add only the protocol, signames and `_socket`; bin/scrun-py
  loads nothing of its own.
* `TestPyslurmIsLazy`: pyslurm is imported by slurm/pyslurm_api.py alone, in a function.

tests/unit/test_lean.py checks that every `TYPE_CHECKING = False` line points here.
"""

from __future__ import annotations

#: the comment every module's `TYPE_CHECKING = False` line carries
TYPE_CHECKING_NOTE = "# typing not imported at run time: base/lean.py"
