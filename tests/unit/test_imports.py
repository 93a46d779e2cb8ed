"""Dependency direction of scrun_py (nothing imports the CLI; pure modules do no I/O),
checked by parsing every module's imports.

Imports inside functions count too (lazy imports are still dependencies).
"""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "scrun_py"

# The `python -m scrun_py` entry point is the one module that may import the CLI.
CLI_ENTRY_POINTS = {"scrun_py.__main__", "scrun_py.entry"}
PURE_MODULES = ["scrun_py.container.protocol", "scrun_py.site.patterns",
                "scrun_py.container.fastjson", "scrun_py.base.layout", "scrun_py.slurm.argv",
                "scrun_py.slurm.options", "scrun_py.container.status", "scrun_py.base.signames",
                "scrun_py.site.policy", "scrun_py.slurm.parse", "scrun_py.anchor.table",
                "scrun_py.site.trust"]
IO_MODULES = {"subprocess", "socket", "asyncio"}
LUPA_MODULE = "scrun_py.hooks.lua"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def _resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom names (handles `from . import x`)."""
    if not node.level:
        return node.module or ""
    is_package = _modules()[module].name == "__init__.py"
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join([*base, node.module] if node.module else base)


DYNAMIC = "<dynamic>"
_LUPA_LITERAL = re.compile(r"^lupa(\.|$)")


def _literal_prefix(node: ast.expr) -> str | None:
    """The text of a string literal, or the literal head of an f-string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            return head.value
    return None


def _dynamic_import(node: ast.Call) -> str | None:
    """What `importlib.import_module(...)` / `__import__(...)` imports, if this is one."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name not in ("import_module", "__import__") or not node.args:
        return None
    return _literal_prefix(node.args[0]) or DYNAMIC


@cache
def imports_of(module: str) -> frozenset[str]:
    """Every module `module` imports, statically or via import_module with a literal."""
    tree = ast.parse(_modules()[module].read_text(), filename=str(_modules()[module]))
    found: set[str] = set()
    nodes = list(ast.walk(tree))
    # import_module(name) with a computed name: a "lupa.…" literal anywhere in the
    # module is taken as what it imports (hooks/lua.py builds f"lupa.{module_name}").
    literals = {text for node in nodes if isinstance(node, ast.expr)
                and (text := _literal_prefix(node)) and _LUPA_LITERAL.match(text)}
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node)
            found.add(base)
            # `from scrun_py.cli import click_app` imports the submodule scrun_py.cli.click_app.
            found.update(f"{base}.{alias.name}" for alias in node.names
                         if f"{base}.{alias.name}" in _modules())
        elif isinstance(node, ast.Call):
            target = _dynamic_import(node)
            if target == DYNAMIC:
                found.update(literals or {DYNAMIC})
            elif target is not None:
                found.add(target)
    return frozenset(found)


def _names(imported: frozenset[str], top: str) -> set[str]:
    return {name for name in imported if name == top or name.startswith(f"{top}.")}


def _closure(module: str) -> set[str]:
    """`module` and every scrun_py module it reaches through its imports."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        if current in seen or current not in _modules():
            continue
        seen.add(current)
        todo.extend(name for name in imports_of(current) if name.startswith("scrun_py"))
    return seen


class TestImportParser:
    def test_finds_every_module(self) -> None:
        """The scan sees the package's modules, including nested ones."""
        modules = _modules()
        assert {"scrun_py", "scrun_py.cli.click_app", "scrun_py.oci.bundle", "scrun_py.hooks.lua",
                *PURE_MODULES} <= set(modules)

    def test_sees_lazy_and_dynamic_imports(self) -> None:
        """Imports inside functions and import_module(f"lupa.…") are found."""
        assert "scrun_py.commands.run" in imports_of("scrun_py.cli.click_app")
        assert _names(imports_of(LUPA_MODULE), "lupa")

    def test_from_package_import_submodule(self) -> None:
        """`from scrun_py.container import fastjson` counts as importing
        scrun_py.container.fastjson."""
        assert "scrun_py.container.fastjson" in imports_of("scrun_py.container.protocol")


class TestDependencyDirection:
    def test_nothing_imports_cli(self) -> None:
        """No module imports scrun_py.cli.click_app (only the `python -m` entry point)."""
        offenders = sorted(m for m in _modules()
                           if m not in CLI_ENTRY_POINTS and m != "scrun_py.cli.click_app"
                           and _names(imports_of(m), "scrun_py.cli.click_app"))
        assert [] == offenders

    def test_only_hooks_lua_imports_lupa(self) -> None:
        """lupa is imported by scrun_py/hooks/lua.py and nowhere else."""
        users = sorted(m for m in _modules() if _names(imports_of(m), "lupa"))
        assert [LUPA_MODULE] == users

    def test_no_unresolved_dynamic_imports(self) -> None:
        """Every import_module() call has a name this check can see (else it proves nothing)."""
        assert [] == sorted(m for m in _modules() if DYNAMIC in imports_of(m))

    @pytest.mark.parametrize("module", PURE_MODULES)
    def test_pure_module_does_no_io(self, module: str) -> None:
        """A pure module imports no subprocess/socket/asyncio, directly or via scrun_py."""
        offenders = sorted(f"{m} imports {name}" for m in _closure(module)
                           for top in IO_MODULES for name in _names(imports_of(m), top))
        assert [] == offenders


class TestSlurmBoundary:
    """Only scrun_py/slurm/ knows Slurm's command lines and output: the anchor and the
    verbs go through a backend (or slurm/cancel.py, slurm/stderr_filter.py); no module
    outside slurm/ names a Slurm command to run (doctor takes its command lines from
    slurm/argv.py, what they print is read by slurm/parse.py)."""

    SEALED = ("scrun_py.slurm.argv", "scrun_py.slurm.parse")
    #: doctor asks Slurm itself (srun --version, scontrol ping, the staging probe's
    #: step), not a container's job: its argv come from slurm/argv.py, their answers are
    #: read by slurm/parse.py
    DOCTOR = ("scrun_py.commands.doctor.context", "scrun_py.commands.doctor.slurm",
              "scrun_py.commands.doctor.staging")

    def test_anchor_and_commands_do_not_import_argv_or_parse(self) -> None:
        offenders = sorted(f"{m} imports {name}" for m in _modules()
                           if m.startswith(("scrun_py.anchor", "scrun_py.commands"))
                           and m not in self.DOCTOR
                           for name in imports_of(m) if name in self.SEALED)
        assert [] == offenders

    def test_only_doctor_is_let_through(self) -> None:
        """Each module of DOCTOR still imports a sealed module (else it leaves DOCTOR)."""
        assert [] == [m for m in self.DOCTOR if not set(self.SEALED) & imports_of(m)]

    def test_the_check_sees_an_import(self) -> None:
        """`from scrun_py.slurm import argv, parse` (the CLI backend's way) is seen, else
        the check above proves nothing."""
        assert set(self.SEALED) <= imports_of("scrun_py.slurm.cli_backend")

    #: the names of Slurm's client commands and daemons' tools a module could run
    COMMANDS = frozenset({"salloc", "srun", "scancel", "squeue", "sinfo", "scontrol",
                          "sbatch", "sacct", "sacctmgr", "sstat", "sattach", "sprio",
                          "sshare", "sdiag", "strigger", "sreport"})
    #: where a command's name stands outside slurm/, and why it may
    NAMED_OUTSIDE = frozenset({
        # oci.conf's SrunPath default (Slurm's documented one): a site setting the
        # anchor passes to slurm/argv.py's builders, not an argv
        ("scrun_py.anchor.handoff", "srun"), ("scrun_py.site.oci_conf", "srun"),
        ("scrun_py.site.oci_conf_syntax", "srun"),
        # `--version`'s slurm line: base/ imports no other layer, and the verb imports
        # nothing beyond base/version.py (TestNoClickVerbsStayLean.test_the_command_script)
        ("scrun_py.base.version", "srun"),
        # where PATH's srun is installed (the compiled-in default of a --prefix build):
        # looked up, never run
        ("scrun_py.base.conf_lookup", "srun"),
    })

    @staticmethod
    def _commands_named(module: str, commands: frozenset[str]) -> set[str]:
        """The Slurm commands `module` names in a string of its own: a literal that is
        exactly a command's name (an argv's head, a program looked up on PATH), or an
        argv literal whose head starts with one ("srun --version" in a message is text)."""
        tree = ast.parse(_modules()[module].read_text())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in commands:
                found.add(str(node.value))
            elif isinstance(node, (ast.List, ast.Tuple)) and node.elts:
                head = _literal_prefix(node.elts[0])
                if head is not None and head.split(" ")[0] in commands:
                    found.add(head.split(" ")[0])
        return found

    def test_no_module_outside_slurm_names_a_command(self) -> None:
        """Outside scrun_py/slurm/, no module builds a Slurm command line or names a Slurm
        command to run: slurm/argv.py's builders (and CLIENT_COMMANDS) do, slurm/parse.py
        and slurm/conf.py read what Slurm prints and slurm.conf."""
        named = {(m, name) for m in _modules() if not m.startswith("scrun_py.slurm")
                 for name in self._commands_named(m, self.COMMANDS)}
        assert set() == named - self.NAMED_OUTSIDE

    def test_the_exceptions_are_still_needed(self) -> None:
        """Each exception names a command the module still names (else it goes)."""
        stale = {(m, name) for m, name in self.NAMED_OUTSIDE
                 if name not in self._commands_named(m, self.COMMANDS)}
        assert set() == stale

    def test_the_command_check_sees_an_argv(self) -> None:
        """The check finds slurm/argv.py's builders' commands, else it proves nothing."""
        assert {"salloc", "srun", "scancel", "squeue", "scontrol"} <= self._commands_named(
            "scrun_py.slurm.argv", self.COMMANDS)


class TestAnchorStaysLean:
    def test_anchor_does_not_import_heavy_modules(self) -> None:
        """The anchor (one per container) gets validated data from create, so it never
        loads pydantic or click; it runs on threads, so no asyncio (nor structlog, which
        imports it); and it leaves out what would only cost memory (datetime, dataclasses,
        ssl, sysconfig's data, pathlib with urllib and ipaddress, json: paths are strings,
        the spec and the control messages go through fastjson; typing: its records and
        interfaces come from base/records.py at run time; socket.py: the control socket
        is the C module's). It starts faster and stays smaller."""
        import subprocess
        import sys

        heavy = {"pydantic", "click", "asyncio", "structlog", "dataclasses", "datetime",
                 "ssl", "_sysconfigdata", "pathlib", "urllib", "ipaddress", "json", "typing",
                 "socket"}
        code = ("import sys\n"
                "from scrun_py.anchor.__main__ import preload\n"
                "preload()\n"
                "from scrun_py.base import logs\n"
                "from scrun_py.hooks._builtins import system_search_paths\n"
                "logs.rfc3339_now(); system_search_paths((5, 4))\n"
                "print(' '.join(sorted(m.split('.')[0] for m in sys.modules)))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout.split()
        loaded = {name for name in out if any(name.startswith(h) for h in heavy)}
        assert set() == loaded
        assert "scrun_py" in out  # the probe ran

    def test_salloc_runs_before_subprocess_and_re_are_imported(self, tmp_path: Path) -> None:
        """Everything the anchor does before salloc runs is on create's critical path:
        its imports, loading scrun.lua, the backend.  salloc is spawned without
        subprocess (procs.spawn), and subprocess, shlex and re (with locale, selectors
        and signal) are imported only once it runs; signal numbers and handlers come
        from base/signames.py.  Checked at the moment salloc runs,
        with a stand-in salloc, a scrun.lua and the CLI backend."""
        import subprocess
        import sys

        salloc = tmp_path / "salloc"
        salloc.write_text("#!/bin/sh\necho 'salloc: Granted job allocation 5' >&2\n"
                          'while [ "$1" != "--" ]; do shift; done; shift\n'
                          'SLURM_JOB_ID=5 exec "$@"\n')
        salloc.chmod(0o755)
        (tmp_path / "slurm.conf").write_text("ClusterName=c1\n")
        (tmp_path / "scrun.lua").write_text(
            "function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id,"
            " user_id, group_id, job_env)\n  return slurm.SUCCESS\nend\n"
            "function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path,"
            " orig_root_path, spool_dir, config_file, jobid, user_id, group_id)\n"
            "  return slurm.SUCCESS\nend\n")
        code = (
            "import os, sys\n"
            "from scrun_py.anchor.__main__ import preload\n"
            "preload()\n"
            "from scrun_py.base import logs\n"
            "from scrun_py.base.threads import Cancel\n"
            "from scrun_py.slurm.backend import AllocRequest\n"
            "from scrun_py.hooks.interface import load_hooks\n"
            "from scrun_py.slurm import choice\n"
            "from scrun_py.slurm.options import job_options\n"
            "log = logs.Logger(logs.Sinks(stderr_level=logs.LEVELS['error'],"
            " file_level=logs.LEVELS['error'], syslog_level=logs.LEVELS['quiet'],"
            " log_path=None, log_format='text'), {})\n"
            f"hooks = load_hooks({str(tmp_path / 'slurm.conf')!r}, override='', log=log)\n"
            "assert type(hooks).__name__ == 'LuaHooks', hooks\n"
            f"backend = choice.backend_for('cli', None, choice.CliOptions(), log)\n"
            "backend._jobs._salloc = " + repr(str(salloc)) + "\n"
            "opts = job_options({}).alloc\n"
            "WATCH = ('subprocess', 're', 'shlex', 'locale', 'selectors', 'socket', 'signal')\n"
            "seen = []\n"
            "alloc = backend._jobs.allocate(AllocRequest(opts, dict(os.environ), lambda j: None,"
            " 10), Cancel(), spawned=lambda: seen.append([m for m in WATCH if m in sys.modules]))\n"
            "backend.release(alloc, 0, 10)\n"
            "print(alloc.job_id, seen)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, cwd=tmp_path).stdout.strip()
        assert "5 [[]]" == out


class TestCreateStaysLean:
    def test_create_hands_the_spec_over_without_heavy_modules(self, tmp_path: Path) -> None:
        """`create` validates while the forked anchor imports; the later of the two
        starts salloc, so create's own imports are on the critical path too: no
        pathlib (with urllib.parse and ipaddress), pydantic, click, json, subprocess,
        typing, re or signal by the time it hands the anchor its spec (checked at that
        moment, with a plain config.json and oci.conf and no --root, as podman calls
        it)."""
        import subprocess
        import sys

        bundle = tmp_path / "bundle"
        (bundle / "rootfs" / "bin").mkdir(parents=True)
        (bundle / "rootfs" / "bin" / "true").touch(mode=0o755)  # create looks it up
        (bundle / "config.json").write_text(
            '{"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": {"args": ["true"],'
            ' "env": ["PATH=/bin"], "terminal": false, "cwd": "/"}}')
        conf = tmp_path / "etc"
        conf.mkdir()
        (conf / "slurm.conf").write_text("ClusterName=c1\n")
        (conf / "oci.conf").write_text(
            'RunTimeRun="crun run --bundle %b %n.%u.%j.%s.%t"\n'
            'RunTimeKill="crun kill %n.%u.%j.%s.%t"\n'
            'RunTimeDelete="crun delete --force %n.%u.%j.%s.%t"\n')
        heavy = ("pathlib", "urllib", "ipaddress", "pydantic", "click", "json", "subprocess",
                 "typing", "dataclasses", "re", "signal")
        code = (
            "import sys\n"
            "from scrun_py.anchor import launch\n"
            "from scrun_py.cli import fast_path\n"
            "seen = []\n"
            "def send(self, spec):\n"
            f"    seen.append([m for m in {heavy!r} if m in sys.modules])\n"
            "    raise OSError(5, 'stopped by the test')\n"
            "launch.EarlyAnchor.send = send\n"
            f"argv = ['-f', {str(conf / 'slurm.conf')!r}, 'create', '--bundle',"
            f" {str(bundle)!r}, 'c1']\n"
            "rc = fast_path.run(argv, fast_path.parse(argv))\n"
            "print(rc, seen)\n")
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
               "XDG_RUNTIME_DIR": str(tmp_path / "run")}
        (tmp_path / "run").mkdir()
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env=env, cwd=tmp_path).stdout.strip()
        assert "1 [[]]" == out.splitlines()[-1]


CORPUS = Path(__file__).resolve().parent / "site_corpus"
REPO = PACKAGE_DIR.parent
#: never imported by `create` or the anchor, whatever the site's files say: pydantic
#: (~115 ms), and what only importlib.metadata and pydantic bring along
CORPUS_FORBIDDEN = ("pydantic", "pydantic_core", "importlib.metadata", "inspect", "email",
                    "zipfile")
# the modules of CORPUS_FORBIDDEN loaded, as a probe's expression
_FORBIDDEN_NOW = (f"sorted(m for m in sys.modules if any(m == f or m.startswith(f + '.')"
                  f" for f in {CORPUS_FORBIDDEN!r}))")


def _user() -> str:
    import os
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _project_oci_confs() -> dict[str, str]:
    """The project's own oci.conf files: oci.conf.example, the active block of it that
    scripts/cluster.sh writes, and that block as cluster.sh rewrites it for a 22.05
    cluster of several nodes."""
    example = (REPO / "oci.conf.example").read_text(encoding="utf-8")
    cluster_sh = (REPO / "scripts" / "cluster.sh").read_text(encoding="utf-8")
    # cluster.sh: grep -v '^[[:space:]]*#' oci.conf.example | grep -v '^[[:space:]]*$'
    assert "grep -v '^[[:space:]]*#' \"$REPO/oci.conf.example\"" in cluster_sh
    active = "".join(line + "\n" for line in example.splitlines()
                     if line.strip() and not line.lstrip().startswith("#"))
    taskenv = "scrun_py.oci.taskenv %n %t %b -- "
    assert taskenv in cluster_sh
    multinode = active.replace('RunTimeRun="exec ',
                               f'RunTimeRun="exec /opt/scrun-py/venv/bin/python -m {taskenv}')
    assert multinode != active
    return {"oci.conf.example": example, "cluster.sh": active,
            "cluster.sh-22.05-nodes": multinode}


OCI_CONFS = {**{p.name: p.read_text(encoding="utf-8")
                for p in sorted((CORPUS / "oci").glob("*.conf"))}, **_project_oci_confs()}
# scrun-py.toml, scrun.lua and plugstack.conf beside these oci.conf files
WITH_SITE_FILES = ("24.11-crun-run.conf", "26.05-site-every-key.conf", "cluster.sh")


class TestSiteCorpusStaysLean:
    """`create` and the anchor on every oci.conf of the corpus (Slurm's documented
    examples for each release we support, sites' files with every key, the project's
    own), and with the other site files (scrun-py.toml with every table, a scrun.lua
    whose hooks log, a plugstack.conf): none of CORPUS_FORBIDDEN is imported by `create`
    when it hands the anchor its spec, nor by the anchor when salloc runs or once it has
    run both hooks and written its audit record (the moments of
    TestCreateStaysLean and TestAnchorStaysLean, on the spec create handed over)."""

    @staticmethod
    def _site(tmp_path: Path, oci_conf: str, site_files: bool) -> Path:
        """A slurm.conf directory with `oci_conf` (and the corpus' site files); its
        slurm.conf."""
        etc = tmp_path / "etc"
        etc.mkdir()
        names = ["slurm.conf", *(["scrun-py.toml", "scrun.lua", "plugstack.conf"]
                                 if site_files else [])]
        for name in names:
            text = (CORPUS / "site" / name).read_text(encoding="utf-8")
            (etc / name).write_text(text.replace("@DIR@", str(tmp_path)))
        if not site_files:  # slurm.conf names no plugstack.conf then
            (etc / "slurm.conf").write_text("ClusterName=corpus\n")
        (etc / "oci.conf").write_text(oci_conf)
        return etc / "slurm.conf"

    @staticmethod
    def _bundle(tmp_path: Path) -> Path:
        """A bundle as docker writes one (namespaces and capabilities: the corpus
        policy rewrites it and lets it through)."""
        import json

        bundle = tmp_path / "bundle"
        (bundle / "rootfs" / "bin").mkdir(parents=True)
        (bundle / "rootfs" / "bin" / "true").touch(mode=0o755)  # create looks it up
        caps = ["CAP_CHOWN", "CAP_KILL", "CAP_NET_RAW"]
        (bundle / "config.json").write_text(json.dumps({
            "ociVersion": "1.0.2", "root": {"path": "rootfs"},
            "process": {"args": ["true"], "env": ["PATH=/bin", "SLURM_SITE_OPTION=1"],
                        "terminal": False, "cwd": "/",
                        "capabilities": {"bounding": caps, "effective": caps,
                                         "permitted": caps}},
            "linux": {"namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount",
                                                           "network")]}}))
        return bundle

    def _create(self, tmp_path: Path, slurm_conf: Path, bundle: Path) -> tuple[
            list[list[str]], str]:
        """Run `create` as podman calls it up to its handover: the forbidden modules
        loaded then, and the spec it handed over."""
        import subprocess
        import sys

        code = (
            "import sys\n"
            "from scrun_py.anchor import launch\n"
            "from scrun_py.cli import fast_path\n"
            "seen, specs = [], []\n"
            "def send(self, spec):\n"
            f"    seen.append({_FORBIDDEN_NOW})\n"
            "    specs.append(spec.to_json())\n"
            "    raise OSError(5, 'stopped by the test')\n"
            "launch.EarlyAnchor.send = send\n"
            f"argv = ['-f', {str(slurm_conf)!r}, 'create', '--bundle', {str(bundle)!r}, 'c1']\n"
            "rc = fast_path.run(argv, fast_path.parse(argv))\n"
            "import json\n"
            "print(json.dumps({'rc': rc, 'seen': seen, 'specs': specs}))\n")
        (tmp_path / "run").mkdir()
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
               "XDG_RUNTIME_DIR": str(tmp_path / "run")}
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env=env, cwd=tmp_path, timeout=60)
        import json

        out = json.loads(res.stdout.strip().splitlines()[-1])
        assert 1 == out["rc"], res.stderr  # stopped at the handover, not before
        assert 1 == len(out["specs"]), res.stderr
        return out["seen"], out["specs"][0]

    def _anchor(self, tmp_path: Path, spec: str) -> dict[str, list[str]]:
        """The anchor on `spec`, as run_anchor prepares it (oci.conf's levels, SrunPath
        and SrunArgs, scrun.lua), then salloc (a stand-in), both hooks and the audit
        record: the forbidden modules loaded when salloc runs and at the end, and
        ("ran") the hooks' class and whether stage_in ran."""
        import json
        import subprocess
        import sys

        salloc = tmp_path / "salloc"
        salloc.write_text("#!/bin/sh\necho 'salloc: Granted job allocation 5' >&2\n"
                          'while [ "$1" != "--" ]; do shift; done; shift\n'
                          'SLURM_JOB_ID=5 exec "$@"\n')
        salloc.chmod(0o755)
        code = (
            "import json, os, sys\n"
            "from scrun_py.anchor.__main__ import _logger, _prepare, preload\n"
            "preload()\n"
            "from scrun_py.anchor.handoff import AnchorSpec\n"
            "from scrun_py.base.threads import Cancel\n"
            "from scrun_py.slurm.backend import AllocRequest\n"
            "from scrun_py.container import spool\n"
            "from scrun_py.slurm.options import job_options\n"
            "spec = AnchorSpec.from_json(sys.stdin.read())\n"
            "spool.ensure_root(spec.root)\n"
            "spool.make_container_dir(spec.root, spec.container_id)\n"
            "log = _logger(spec, dict(os.environ))\n"
            "lc = _prepare(spec, log)\n"
            "backend = lc.backend\n"
            f"backend._jobs._salloc = {str(salloc)!r}\n"
            "seen = {}\n"
            "def spawned():\n"
            f"    seen['salloc'] = {_FORBIDDEN_NOW}\n"
            "    backend._start_version_probe()\n"
            "alloc = backend._jobs.allocate(AllocRequest(job_options({}).alloc,"
            " dict(os.environ), lambda j: None, 10), Cancel(), spawned=spawned)\n"
            "lc.container.stage_in(alloc, os.getuid(), os.getgid(),"
            " lambda cmd: backend.command_argv(alloc.job_id, cmd), Cancel())\n"
            "seen['ran'] = [type(lc.container.hooks).__name__, str(lc.container.staged_in)]\n"
            "lc.container.stage_out()\n"
            "lc.container.audit_exit(0)\n"
            "backend._version_known.wait(10)\n"
            "backend.release(alloc, 0, 10)\n"
            f"seen['end'] = {_FORBIDDEN_NOW}\n"
            "print(json.dumps(seen))\n")
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
               "SCRUN_PY_SLURM_BACKEND": "cli"}
        res = subprocess.run([sys.executable, "-c", code], input=spec, capture_output=True,
                             text=True, check=True, env=env, cwd=tmp_path, timeout=60)
        seen: dict[str, list[str]] = json.loads(res.stdout.strip().splitlines()[-1])
        return seen

    @pytest.mark.parametrize(("name", "site_files"), [
        *((name, False) for name in OCI_CONFS), *((name, True) for name in WITH_SITE_FILES)],
        ids=lambda v: v if isinstance(v, str) else ("site files" if v else "oci.conf only"))
    def test_no_forbidden_module(self, tmp_path: Path, name: str, site_files: bool) -> None:
        slurm_conf = self._site(tmp_path, OCI_CONFS[name], site_files)
        seen, spec = self._create(tmp_path, slurm_conf, self._bundle(tmp_path))
        assert [[]] == seen
        anchor = self._anchor(tmp_path, spec)
        hooks = ["LuaHooks", "True"] if site_files else ["NoHooks", "False"]
        assert {"salloc": [], "end": [], "ran": hooks} == anchor
        if site_files:  # the policy rewrote config.json, the anchor wrote its record
            import json

            config = json.loads((tmp_path / "bundle" / "config.json").read_text())
            assert config["process"]["noNewPrivileges"]
            assert '"event":"exit"' in (tmp_path / f"audit-{_user()}.log").read_text()

    def test_the_corpus_is_there(self) -> None:
        """The corpus holds each supported release's documented examples (in create/start
        and in run mode) and the project's own files."""
        releases = {name.split("-")[0] for name in OCI_CONFS if name[0].isdigit()}
        assert {"22.05", "24.11", "25.11", "26.05"} == releases
        for release in releases:
            assert {f"{release}-crun-run.conf", f"{release}-runc-create.conf"} <= set(OCI_CONFS)
        assert {"oci.conf.example", "cluster.sh"} <= set(OCI_CONFS)


class TestNoClickVerbsStayLean:
    """`state` is polled and engines run `start` and `delete` once per container: the
    console script runs them without click, and imports for them no more than the
    container handle needs (the modules listed here, against a bare interpreter).  A
    failure may import more (the fatal path writes its record with json)."""

    ALLOWED = frozenset({
        "scrun_py", "scrun_py.entry", "scrun_py.cli.fast_path", "scrun_py.cli.argv_table",
        "scrun_py.base.invocation", "scrun_py.base.layout", "scrun_py.commands",
        "scrun_py.commands.dispatch",
        "scrun_py.commands.state", "scrun_py.commands.delete", "scrun_py.container.handle",
        "scrun_py.container.record", "scrun_py.container.rootdir",
        # whether a site file is there to ask for an audit record, beside the slurm.conf
        # in use (os alone)
        "scrun_py.site", "scrun_py.site.presence", "scrun_py.base.conf_lookup",
        "scrun_py.container.fastjson", "scrun_py.base.errors", "scrun_py.base.procs", "_json",
        "scrun_py.base", "scrun_py.cli", "scrun_py.container",
        # --log is opened through the one opener of the paths a caller names (os alone)
        "scrun_py.base.callerpath",
        # every module's `from __future__ import annotations`; a venv whose start-up
        # imports it already (some .pth files do) has it in the bare set
        "__future__"})

    @staticmethod
    def _importtime(*args: str) -> tuple[str, set[str]]:
        """The stdout of `python -X importtime ARGS` and the modules it imported."""
        import subprocess
        import sys

        res = subprocess.run([sys.executable, "-X", "importtime", *args],
                             capture_output=True, text=True, check=False, timeout=60)
        return res.stdout, {line.rpartition("|")[2].strip() for line in res.stderr.splitlines()
                            if line.startswith("import time:") and "|" in line} - {"package"}

    @classmethod
    def _imported(cls, *code: str) -> set[str]:
        return cls._importtime("-c", "\n".join(code))[1]

    @pytest.mark.parametrize("argv", [["state", "c1"], ["delete", "c1"],
                                      ["delete", "--force", "ghost"]])
    def test_import_set(self, tmp_path: Path, argv: list[str]) -> None:
        import json

        cdir = tmp_path / "c1"
        cdir.mkdir(mode=0o700)
        (cdir / "state.json").write_text(json.dumps(
            {"id": "c1", "bundle": "/b", "rootfs": "/b/r", "status": "stopped"}))
        bare = self._imported("pass")
        used = self._imported(
            "import sys",
            f"sys.argv = ['scrun-py', '--root', {str(tmp_path)!r}, '--log', "
            f"{str(tmp_path / 'log')!r}, '--log-format', 'json', *{argv!r}]",
            "from scrun_py.entry import main", "main()")
        assert "scrun_py.commands" in used  # the probe ran the verb
        assert set() == used - bare - self.ALLOWED

    # a request to the anchor: the protocol and the C socket module (socket.py's wrapper
    # imports selectors, enum and collections: a quarter of a `start`)
    REQUEST = frozenset({"scrun_py.container.protocol", "_socket", "errno",
                         "scrun_py.commands.start", "scrun_py.commands.kill",
                         "scrun_py.base.signames"})

    @pytest.mark.parametrize("argv", [["start", "c1"], ["kill", "c1", "TERM"]])
    def test_import_set_of_a_request(self, tmp_path: Path, argv: list[str]) -> None:
        import json
        import os
        import socket
        import threading

        from scrun_py.base.procs import process_start_time

        cdir = tmp_path / "c1"
        cdir.mkdir(mode=0o700)
        # a created container whose anchor is this process, listening on its socket
        (cdir / "state.json").write_text(json.dumps(
            {"id": "c1", "bundle": "/b", "rootfs": "/b/r", "status": "created",
             "anchor_pid": os.getpid(), "anchor_start": process_start_time(os.getpid())}))
        requests: list[bytes] = []
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(str(cdir / "anchor.sock"))
            server.listen()

            def answer() -> None:
                conn, _ = server.accept()
                with conn:
                    requests.append(conn.recv(4096))
                    conn.sendall(b'{"v":1,"ok":true,"job_id":7}\n')

            thread = threading.Thread(target=answer, daemon=True)
            thread.start()
            bare = self._imported("pass")
            used = self._imported(
                "import sys",
                f"sys.argv = ['scrun-py', '--root', {str(tmp_path)!r}, *{argv!r}]",
                "from scrun_py.entry import main", "main()")
            thread.join(10)
        assert 1 == len(requests)  # the probe sent its request
        assert f'"type":"{argv[0]}"' in requests[0].decode()
        assert set() == used - bare - self.ALLOWED - self.REQUEST


    def test_the_command_script(self) -> None:
        """bin/scrun-py, the command pip installs, imports nothing for itself: the wrapper
        pip generates for a console-script entry point imports re on some pip releases
        (5-10 ms on every command)."""
        out, used = self._importtime(
            str(Path(__file__).resolve().parents[2] / "bin" / "scrun-py"), "--version")
        assert "scrun-py version" in out
        assert set() == used - self._imported("pass") - {
            "scrun_py", "scrun_py.entry", "__future__",
            "scrun_py.base", "scrun_py.base.version"}  # the lines --version prints


class TestPyslurmIsLazy:
    """pyslurm is an optional extra, and its import is costly (libslurm, every pyslurm
    module): only scrun_py/slurm/pyslurm_api.py imports it, inside a function."""

    def test_only_pyslurm_api_imports_it(self) -> None:
        users = sorted(m for m in _modules() if _names(imports_of(m), "pyslurm"))
        assert ["scrun_py.slurm.pyslurm_api"] == users

    def test_not_at_module_level(self) -> None:
        tree = ast.parse(_modules()["scrun_py.slurm.pyslurm_api"].read_text())
        top = [name for n in tree.body for name in (
            [a.name for a in n.names] if isinstance(n, ast.Import)
            else [n.module or ""] if isinstance(n, ast.ImportFrom) else [])]
        assert top
        assert [] == [name for name in top if name.startswith("pyslurm")]
