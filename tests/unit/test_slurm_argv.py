"""Golden tests for scrun_py.slurm.argv: the Slurm command lines scrun-py runs.

Each record in tests/golden/ is the exact argv (JSON, one element per line) or
shell command of one builder call.  A missing record is written on first run
(the test passes and says so), except under CI=true, where a missing record fails
and nothing is written; a mismatch fails with a line diff.  When a change is
intended, delete the record and run the test again (without CI=true).
"""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import difflib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from scrun_py.slurm import argv as slurm_argv
from scrun_py.slurm.backend import StepRequest

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "golden"
EXAMPLE_CONF = Path(__file__).resolve().parents[2] / "oci.conf.example"

# RunTimeKill patterns of oci.conf.example (the active one and the commented alternative).
CRUN_KILL = "crun --rootless=true --root=/tmp/ocistate-%u kill -a %n.%u.%j.%s.%t"
CRUN_KILL_UID = "crun --rootless=true --root=/run/user/%U/ kill -a %n.%u.%j.%s.%t"

Rendered = list[str] | str


def render_record(title: str, value: Rendered) -> str:
    """A comment line naming the call, then the argv as JSON (or the command as is)."""
    body = value if isinstance(value, str) else json.dumps(value, indent=2)
    return f"# {title}\n{body}\n"


def check_golden(directory: Path, name: str, text: str, note: Callable[[str], None], *,
                 create: bool) -> None:
    """Compare `text` with `<directory>/<name>.txt`; a missing record is created when
    `create` is true, a failure otherwise."""
    path = directory / f"{name}.txt"
    if not path.exists():
        if not create:
            pytest.fail(f"golden record missing: {path} (records are not created under "
                        "CI=true: run the test without it, review the record, commit it)",
                        pytrace=False)
        directory.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        note(f"golden record created: {path} (review it, then commit it)")
        return
    recorded = path.read_text()
    if recorded == text:
        return
    diff = "".join(difflib.unified_diff(
        recorded.splitlines(keepends=True), text.splitlines(keepends=True),
        fromfile=f"{path} (recorded)", tofile=f"{name} (actual)"))
    pytest.fail(f"output differs from the golden record {path}:\n{diff}\n"
                f"If the change is intended, delete {path} and run the test again.",
                pytrace=False)


def creates_records() -> bool:
    """Whether a missing golden record is written: never under CI=true."""
    return os.environ.get("CI") != "true"


@pytest.fixture
def golden(capsys: pytest.CaptureFixture[str]) -> Callable[[str, str, Rendered], None]:
    def note(msg: str) -> None:
        with capsys.disabled():  # shown even though the test passes
            sys.stdout.write(f"\n{msg}\n")

    def check(name: str, title: str, value: Rendered) -> None:
        check_golden(GOLDEN_DIR, name, render_record(title, value), note,
                     create=creates_records())

    return check


CASES: dict[str, tuple[str, Callable[[], Rendered]]] = {
    "salloc_default": (
        "build_salloc_argv([], '/usr/bin/env')",
        lambda: slurm_argv.build_salloc_argv([], "/usr/bin/env")),
    "salloc_options": (
        "build_salloc_argv(['--partition=debug', '--time=10', '--chdir=/w'], "
        "'/opt/core utils/env', salloc='/usr/bin/salloc')",
        lambda: slurm_argv.build_salloc_argv(["--partition=debug", "--time=10", "--chdir=/w"],
                                             "/opt/core utils/env", salloc="/usr/bin/salloc")),
    "srun_container_id": (
        "build_srun_argv(StepRequest(job_id=42, container_id='c1', bundle='/b/c1', "
        "args=['sh', '-c', 'echo hi'], env={}))",
        lambda: slurm_argv.build_srun_argv(StepRequest(
            job_id=42, container_id="c1", bundle="/b/c1", args=["sh", "-c", "echo hi"],
            env={}))),
    "srun_no_container_id": (
        "build_srun_argv(StepRequest(job_id=42, container_id='c1', bundle='/b/c1', "
        "args=['true'], env={}), container_id_flag=False)",
        lambda: slurm_argv.build_srun_argv(StepRequest(
            job_id=42, container_id="c1", bundle="/b/c1", args=["true"], env={}),
            container_id_flag=False)),
    "srun_pty": (
        "build_srun_argv(StepRequest(job_id=42, container_id='c1', bundle='/b/c1', "
        "args=['sh'], env={}, pty=True))",
        lambda: slurm_argv.build_srun_argv(StepRequest(
            job_id=42, container_id="c1", bundle="/b/c1", args=["sh"], env={}, pty=True))),
    "srun_everything": (
        "build_srun_argv(StepRequest(job_id=7, container_id='web.1', bundle='/spool/web 1', "
        "args=['/bin/echo', '--', 'a b'], env={}, step_opts=['--mpi=pmix', '--label'], "
        "pty=True), srun_path='/opt/slurm/bin/srun', "
        "srun_args=['--verbose', '--mem-bind=local'])",
        lambda: slurm_argv.build_srun_argv(
            StepRequest(job_id=7, container_id="web.1", bundle="/spool/web 1",
                        args=["/bin/echo", "--", "a b"], env={},
                        step_opts=["--mpi=pmix", "--label"], pty=True),
            srun_path="/opt/slurm/bin/srun", srun_args=["--verbose", "--mem-bind=local"])),
    "command_step_default": (
        "build_command_step_argv(job_id=42, command='mkdir -p /scratch/x', "
        "env_path='/usr/bin/env', srun=['/usr/bin/srun'])",
        lambda: slurm_argv.build_command_step_argv(job_id=42, command="mkdir -p /scratch/x",
                                                   env_path="/usr/bin/env",
                                                   srun=["/usr/bin/srun"])),
    "command_step_custom": (
        "build_command_step_argv(job_id=42, command='echo \"$SLURMD_NODENAME\"', "
        "env_path='/bin/env', srun=['/opt/slurm/bin/srun', '--verbose'], "
        "name='scrun-signal', overlap=False)",
        lambda: slurm_argv.build_command_step_argv(
            job_id=42, command='echo "$SLURMD_NODENAME"', env_path="/bin/env",
            srun=["/opt/slurm/bin/srun", "--verbose"], name="scrun-signal", overlap=False)),
    "version": (
        "build_version_argv('/opt/slurm/bin/srun')",
        lambda: slurm_argv.build_version_argv("/opt/slurm/bin/srun")),
    "ping": (
        "build_ping_argv('/opt/slurm/bin/scontrol')",
        lambda: slurm_argv.build_ping_argv("/opt/slurm/bin/scontrol")),
    "client_commands": (
        "CLIENT_COMMANDS",
        lambda: list(slurm_argv.CLIENT_COMMANDS)),
    "scancel_job": (
        "build_scancel_argv(42)",
        lambda: slurm_argv.build_scancel_argv(42)),
    "scancel_signal_full": (
        "build_scancel_argv(42, signal=15, full=True)",
        lambda: slurm_argv.build_scancel_argv(42, signal=15, full=True)),
    "scancel_step": (
        "build_scancel_argv(42, signal=9, step_id=0)",
        lambda: slurm_argv.build_scancel_argv(42, signal=9, step_id=0)),
    "step_list": (
        "build_step_list_argv(42)",
        lambda: slurm_argv.build_step_list_argv(42)),
    "job_state": (
        "build_job_state_argv(42)",
        lambda: slurm_argv.build_job_state_argv(42)),
    "job_info": (
        "build_job_info_argv(42)",
        lambda: slurm_argv.build_job_info_argv(42)),
    "job_reason": (
        "build_job_reason_argv(42)",
        lambda: slurm_argv.build_job_reason_argv(42)),
    "signal_crun": (
        f"signal_shell_command({CRUN_KILL!r}, job_id=42, step_id=0, signal=15)",
        lambda: slurm_argv.signal_shell_command(CRUN_KILL, job_id=42, step_id=0, signal=15)),
    "signal_crun_uid": (
        f"signal_shell_command({CRUN_KILL_UID!r}, job_id=7, step_id=3, signal=9)",
        lambda: slurm_argv.signal_shell_command(CRUN_KILL_UID, job_id=7, step_id=3, signal=9)),
    "signal_crun_two_tasks": (
        f"signal_shell_command({CRUN_KILL!r}, job_id=42, step_id=0, signal=15, "
        "tasks_per_node=2)",
        lambda: slurm_argv.signal_shell_command(CRUN_KILL, job_id=42, step_id=0, signal=15,
                                                tasks_per_node=2)),
    "signal_crun_marked": (
        f"signal_shell_command({CRUN_KILL!r}, job_id=42, step_id=0, signal=15, "
        "tasks_per_node=2, done={'n1:0', 'n2:1'})",
        lambda: slurm_argv.signal_shell_command(CRUN_KILL, job_id=42, step_id=0, signal=15,
                                                tasks_per_node=2, done={"n2:1", "n1:0"})),
    "node_runtime_ps": (
        f"node_runtime_command({CRUN_KILL!r}, ['ps', '--format', 'json'], job_id=42, "
        "step_id=0)",
        lambda: slurm_argv.node_runtime_command(CRUN_KILL, ["ps", "--format", "json"],
                                                job_id=42, step_id=0)),
    "node_runtime_exec_uid": (
        f"node_runtime_command({CRUN_KILL_UID!r}, ['exec', '--tty', '--cwd', '/w'], "
        "job_id=7, step_id=3)",
        lambda: slurm_argv.node_runtime_command(CRUN_KILL_UID, ["exec", "--tty", "--cwd", "/w"],
                                                job_id=7, step_id=3)),
    "step_nodes": (
        "build_step_nodes_argv(42, 3)",
        lambda: slurm_argv.build_step_nodes_argv(42, 3)),
    "node_step_default": (
        "build_node_step_argv(job_id=42, command='crun ps c')",
        lambda: slurm_argv.build_node_step_argv(job_id=42, command="crun ps c")),
    "node_step_pty_nodelist": (
        "build_node_step_argv(job_id=42, command='crun exec c sh', "
        "srun=['/opt/srun', '--mpi=none'], name='scrun-exec', nodelist='n1', pty=True)",
        lambda: slurm_argv.build_node_step_argv(
            job_id=42, command="crun exec c sh", srun=["/opt/srun", "--mpi=none"],
            name="scrun-exec", nodelist="n1", pty=True)),
}


class TestGoldenRecords:
    @pytest.mark.parametrize("name", sorted(CASES))
    def test_matches_record(self, name: str,
                            golden: Callable[[str, str, Rendered], None]) -> None:
        """The builder's output is exactly the recorded one."""
        title, build = CASES[name]
        golden(name, title, build())

    def test_kill_patterns_are_the_examples(self) -> None:
        """The RunTimeKill patterns used above are the ones oci.conf.example documents, plus
        the `-a` that sites often write (the example leaves it out; scrun-py drops it)."""
        text = EXAMPLE_CONF.read_text()
        assert f'RunTimeKill="{CRUN_KILL.replace(" kill -a ", " kill ")}"' in text
        assert f'#RunTimeKill="{CRUN_KILL_UID.replace(" kill -a ", " kill ")}"' in text


class TestGoldenHelper:
    def test_creates_missing_record(self, tmp_path: Path) -> None:
        """A missing record is written, the check passes, and a note names the file."""
        notes: list[str] = []
        check_golden(tmp_path, "rec", "a\nb\n", notes.append, create=True)
        assert "a\nb\n" == (tmp_path / "rec.txt").read_text()
        assert 1 == len(notes)
        assert str(tmp_path / "rec.txt") in notes[0]

    def test_missing_record_fails_when_not_creating(self, tmp_path: Path) -> None:
        """Without `create` (CI=true) a missing record fails, naming the file, and
        nothing is written."""
        notes: list[str] = []
        with pytest.raises(pytest.fail.Exception) as info:
            check_golden(tmp_path / "golden", "rec", "a\nb\n", notes.append, create=False)
        assert f"golden record missing: {tmp_path / 'golden' / 'rec.txt'}" in str(info.value)
        assert ([], []) == (notes, list(tmp_path.iterdir()))

    @pytest.mark.parametrize(("ci", "create"), [("true", False), ("", True), (None, True)])
    def test_records_are_never_created_under_ci(self, monkeypatch: pytest.MonkeyPatch,
                                                ci: str | None, create: bool) -> None:
        """The golden fixture creates a missing record except under CI=true."""
        if ci is None:
            monkeypatch.delenv("CI", raising=False)
        else:
            monkeypatch.setenv("CI", ci)
        assert create is creates_records()

    def test_matching_record_passes(self, tmp_path: Path) -> None:
        """An identical record passes silently."""
        (tmp_path / "rec.txt").write_text("a\nb\n")
        notes: list[str] = []
        check_golden(tmp_path, "rec", "a\nb\n", notes.append, create=False)
        assert [] == notes

    def test_mismatch_shows_line_diff(self, tmp_path: Path) -> None:
        """A different output fails with a unified diff and says to delete the record."""
        (tmp_path / "rec.txt").write_text("a\nb\n")
        with pytest.raises(pytest.fail.Exception) as info:
            check_golden(tmp_path, "rec", "a\nc\n", lambda _msg: None, create=True)
        message = str(info.value)
        assert "-b\n" in message
        assert "+c\n" in message
        assert f"delete {tmp_path / 'rec.txt'}" in message
        assert "a\nb\n" == (tmp_path / "rec.txt").read_text()


class TestBuilders:
    @pytest.mark.parametrize(("pattern", "why"), [
        ("docker kill %n", "does not run crun or runc"),
        ("crun --root=/r delete %n.%j", "no kill verb"),
        ("crun kill -a", "no container id"),
        ("crun kill %n.%x", "%x"),
    ])
    def test_node_runtime_refuses(self, pattern: str, why: str) -> None:
        """A RunTimeKill that is no crun/runc kill of a container id gives no command."""
        with pytest.raises(ValueError, match=why):
            slurm_argv.node_runtime_command(pattern, ["ps"], job_id=1, step_id=0)

    def test_node_runtime_exec_prefix_and_path(self) -> None:
        """`exec /usr/bin/runc … kill ID` keeps the binary's path and drops the shell's
        exec; `-a` and the signal after the id are not kept."""
        assert '/usr/bin/runc --root=/r ps 1.0.0' == slurm_argv.node_runtime_command(
            "exec /usr/bin/runc --root=/r kill -a %j.%s.%t 9", ["ps"], job_id=1, step_id=0)

    def test_salloc_job_name(self) -> None:
        """salloc names the job `scrun` unless the options name it (slurm/options.py
        names it after the container): one --job-name either way."""
        argv = slurm_argv.build_salloc_argv(["--job-name=mine"], "/usr/bin/env")
        assert ["salloc", "--job-name=mine", "--"] == argv[:3]
        assert ["salloc", "--job-name=scrun", "--"] == \
            slurm_argv.build_salloc_argv([], "/usr/bin/env")[:3]

    def test_salloc_shell_is_last(self) -> None:
        """The holder script runs under /bin/sh -c after a `--` separator."""
        argv = slurm_argv.build_salloc_argv(["--time=1"], "/usr/bin/env")
        assert ["--", "/bin/sh", "-c", slurm_argv.holder_script("/usr/bin/env")] == argv[-4:]

    @pytest.mark.parametrize("build", [
        lambda: slurm_argv.holder_script("env"),
        lambda: slurm_argv.build_command_step_argv(job_id=1, command="x", env_path="env",
                                                   srun=["/usr/bin/srun"]),
        lambda: slurm_argv.build_command_step_argv(job_id=1, command="x",
                                                   env_path="/usr/bin/env", srun=["srun"]),
    ])
    def test_programs_run_by_name_must_be_resolved(self, build: Callable[[], object]) -> None:
        """env in the holder script, env and the srun env runs: only absolute paths (a
        bare name would be looked up in PATH, in the job's directory for an empty entry)."""
        with pytest.raises(ValueError, match="must be an absolute path"):
            build()

    @pytest.mark.parametrize(("word", "quoted"), [
        ("/usr/bin/env", "/usr/bin/env"), ("/opt/a b/env", "'/opt/a b/env'"),
        ("/o'q/env", "'/o'\"'\"'q/env'"), ("", "''")])
    def test_sh_quote_is_shlex_quote(self, word: str, quoted: str) -> None:
        assert quoted == slurm_argv.sh_quote(word) == shlex.quote(word)

    def test_srun_container_args_follow_separator(self) -> None:
        """Container arguments that look like options stay after `--`, untouched."""
        argv = slurm_argv.build_srun_argv(StepRequest(job_id=1, container_id="c", bundle="/b",
                                                      args=["--help", "-x"], env={}))
        assert ["--", "--help", "-x"] == argv[-3:]

    def test_srun_without_container_id(self) -> None:
        """With container_id_flag=False no --container-id option is emitted (Slurm < 23.02)."""
        argv = slurm_argv.build_srun_argv(
            StepRequest(job_id=1, container_id="c", bundle="/b", args=["x"], env={}),
            container_id_flag=False)
        assert [] == [a for a in argv if a.startswith("--container-id")]
        assert "--container=/b" in argv

    def test_scancel_step(self) -> None:
        """A step id selects `job.step`."""
        assert ["scancel", "--signal=2", "5.1"] == slurm_argv.build_scancel_argv(
            5, signal=2, step_id=1)


class TestSignalShellCommand:
    def test_crun_pattern(self) -> None:
        """Job and step ids are substituted; node and user are left for the node's shell."""
        cmd = slurm_argv.signal_shell_command(CRUN_KILL, job_id=42, step_id=0, signal=15)
        expected = ('crun --rootless=true --root=/tmp/ocistate-"$(id -un)" kill '
                    '"${SLURMD_NODENAME}"."$(id -un)".42.0.0 15')
        assert expected == cmd

    @pytest.mark.parametrize("pattern", ["crun kill -a %j", "crun kill --all %j",
                                         "crun -a kill --all %j"])
    def test_drops_all_flag(self, pattern: str) -> None:
        """`-a`/`--all` are dropped: the engine's kill targets the container's init only."""
        assert "crun kill 7 15" == slurm_argv.signal_shell_command(
            pattern, job_id=7, step_id=0, signal=15)

    def test_keeps_words_that_only_contain_a(self) -> None:
        """Only the exact words -a and --all are dropped, not options that contain them."""
        assert "runc --alt -ab kill 7 9" == slurm_argv.signal_shell_command(
            "runc --alt -ab kill %j", job_id=7, step_id=0, signal=9)

    @pytest.mark.parametrize("per_node", [1, 2])
    def test_marked_form_signals_each_container_once(self, tmp_path: Path,
                                                     per_node: int) -> None:
        """The marked form, run by a real shell as on two nodes: containers in `done` are
        skipped, every other one is signalled and reported; a node succeeds if any of
        its containers took the signal, now or before."""
        crun = tmp_path / "crun"
        crun.write_text('#!/bin/sh\necho "$*" >> "$LOG"\n'
                        'case "$2" in n2.*) exit 1;; esac\n')
        crun.chmod(0o755)
        cmd = slurm_argv.signal_shell_command(f"{crun} kill %n.%t", job_id=1, step_id=0,
                                              signal=15, tasks_per_node=per_node,
                                              done={"n1:0"})
        log = tmp_path / "log"
        results = {}
        for node in ("n1", "n2", "n3"):
            res = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True,
                                 env={"PATH": "/usr/bin:/bin", "LOG": str(log),
                                      "SLURMD_NODENAME": node}, check=False)
            results[node] = (res.returncode, res.stdout)
        tasks = range(per_node)
        assert {"n1": (0, "".join(f"scrun-signal-ok n1:{t}\n" for t in tasks if t)),
                "n2": (1, ""),
                "n3": (0, "".join(f"scrun-signal-ok n3:{t}\n" for t in tasks))} == results
        signalled = [f"kill n1.{t} 15" for t in tasks if t]
        signalled += [f"kill {n}.{t} 15" for n in ("n2", "n3") for t in tasks]
        assert signalled == log.read_text().splitlines()

    def test_percent_escape(self) -> None:
        """`%%` becomes a single `%`."""
        assert "kill 100% 9" == slurm_argv.signal_shell_command(
            "kill 100%%", job_id=1, step_id=0, signal=9)

    def test_uid(self) -> None:
        """`%U` is the numeric uid, expanded by the node's shell."""
        assert 'x "$(id -u)" 1' == slurm_argv.signal_shell_command(
            "x %U", job_id=1, step_id=0, signal=1)

    @pytest.mark.parametrize("pattern", [
        "crun kill %b", "crun kill %@", "crun kill %e", "crun kill %m", "crun kill %p",
        "crun kill %r", "crun kill %Z", "crun kill %x", "crun kill %J",
    ])
    def test_rejects_tokens_it_cannot_expand(self, pattern: str) -> None:
        """A token with no value at signal time raises ValueError naming the token."""
        with pytest.raises(ValueError, match=pattern[-2:]):
            slurm_argv.signal_shell_command(pattern, job_id=1, step_id=0, signal=15)

    def test_rejects_lone_trailing_percent(self) -> None:
        """A pattern ending in a lone `%` is rejected, as slurmstepd's expansion rejects it."""
        with pytest.raises(ValueError, match="%"):
            slurm_argv.signal_shell_command("crun kill x%", job_id=1, step_id=0, signal=15)
