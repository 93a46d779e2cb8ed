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

All of them run without click (entry.py, cli/fast_path.py, cli/argv_table.py).  An
interpreter's own start is ~8-10 ms here (`--version`, which imports next to nothing,
takes 9 ms); Slurm's scrun runs whole verbs in 5-16 ms (docs/performance.md).

The rules
---------
1. **typing is not imported at run time.**  Each module writes

       TYPE_CHECKING = False  # typing not imported at run time: base/lean.py
       if TYPE_CHECKING:
           from typing import Any

   mypy reads any name `TYPE_CHECKING` as typing's constant (true), Python never runs
   the block, and `from __future__ import annotations` keeps every annotation a string.
   `from typing import TYPE_CHECKING` would import typing itself: ~2 ms, ~0.5 MB of
   every anchor.  The block also holds the other imports only annotations use (pathlib's
   Path, `_socket`, the modules of other layers).  `NamedTuple` and `Protocol` come from
   base/records.py: typing's NamedTuple compiles every field's annotation into a
   ForwardRef (1.4 ms for the anchor spec's five records alone), and
   collections.namedtuple compiles a `__new__` from source for every record (120 µs
   each, 2.8 ms of the anchor's imports); a record there shares one `__new__`.
2. **A costly module is imported inside the function that needs it**, where a hot path
   does not reach that function, or replaced where it does.  The measured costs
   (`python -X importtime`, Python 3.11, docs/performance.md):

   * typing: ~2 ms, ~0.5 MB of the anchor.  Instead: rule 1, base/records.py.
   * re (with enum, functools, the sre compiler): 1.5-2.4 ms; pip's console-script
     wrapper imported it, 7 ms of a 32 ms `state` (hence the plain script
     bin/scrun-py).  Instead: string methods; site/oci_conf_syntax.py reads oci.conf's
     pairs and checks its regular expressions by hand.
   * pathlib (with urllib.parse, ipaddress, fnmatch, re): 3-4 ms, ~0.65-1 MB of the
     anchor.  Instead: paths are strings (`os.path`) in everything a hot path imports.
   * subprocess (with locale, re, signal, enum, selectors): ~3 ms of the anchor's
     start-up before salloc; anchor/launch.py's imports took 16 ms with it before the
     fork, 3 without.  Instead: base/procs.py `spawn` (os.posix_spawn) starts
     salloc; subprocess is imported once salloc runs.
   * socket.py (with selectors, enum, collections): 5 ms of a 20 ms `start`.  Instead:
     the C module `_socket` (container/handle.py, container/spool.py, anchor/server.py).
   * signal (its enums, with enum and collections): 3 ms of a ~12 ms `kill`, 0.4 ms of
     the anchor's imports with enum already loaded.  Instead: the C module `_signal`
     (base/signames.py: its constants, `set_handler`, `ignore`).
   * json (with re and enum): a third of a `state`.  Instead: container/fastjson.py, the
     C scanner and encoder of `_json`; json only to word an error or outside the hot
     paths.
   * dataclasses (inspect, ast, dis, tokenize): 7-12 ms of `create`; site/policy.py's
     import went from 10.3 to 1.7 ms without them.  Instead: base/records.py records.
   * importlib.metadata: ~100 modules, 28 ms and 4 MB of an anchor beside pyslurm.
     Instead: slurm/choice.py `installed_release` reads the name of pyslurm's
     metadata directory.
   * pydantic: ~95-125 ms of `create`.  Instead: config.json and oci.conf whose values
     already have their types are read without it (oci/bundle.py `_plain_config`,
     site/oci_conf_syntax.py `read_fields`); the models only word a file that is wrong.
   * click: ~17 ms of every verb.  Instead: cli/fast_path.py reads the hot paths'
     command lines; click parses everything else.
   * asyncio (structlog imports it): ~12 MB resident and 35 ms of every anchor.
     Instead: threads (base/threads.py) and base/logs.py `Logger`.
   * base/flags.py (collections and its records): ~3 ms of `state`, `start`, `kill`,
     `delete`.  Instead: its table as literals, cli/argv_table.py.
   * datetime ~0.35 MB and sysconfig's data ~0.2 MB of the anchor; tomllib 5 ms with
     its re and typing, imported only where a scrun-py.toml exists.
3. **Site files cost only where they exist.**  The modules that read scrun-py.toml
   (site/site_conf.py, site/policy.py, and what site/audit.py needs to read its
   settings) are imported only when container/handle.py `site_file_may_apply` finds a
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
