"""What a user meets in the first hour: an unwritable --log, no arguments, the help of
--log-format, and --version (runc's lines: version, commit, spec, then python and slurm).

Commands run in-process through the console script's entry (entry.main, with os._exit
raising SystemExit) or through the click CLI (click_app.main)."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from unittest import mock

import pytest

from scrun_py import OCI_SPEC_VERSION, __version__
from scrun_py.base import version
from tests.unit.cli_run import run

REPO = Path(__file__).resolve().parents[2]
SHA = "0123456789abcdef0123456789abcdef01234567"


def _entry(argv: list[str]) -> tuple[int, str, str]:
    """entry.main with `argv`, as the console script runs it (os._exit raises here)."""
    from scrun_py import entry

    out, err = io.StringIO(), io.StringIO()

    def fake_exit(code: int) -> None:
        raise SystemExit(code)

    with (mock.patch.object(sys, "argv", ["scrun-py", *argv]),
          mock.patch.object(os, "_exit", fake_exit),
          contextlib.redirect_stdout(out), contextlib.redirect_stderr(err)):
        try:
            entry.main()
        except SystemExit as exc:
            code = exc.code
    return (code if isinstance(code, int) else 1), out.getvalue(), err.getvalue()


# -- 1. an unwritable --log ------------------------------------------------------------------

#: every verb, as engines and users call them (create's bundle does not exist: it must
#: fail on the log before it looks)
VERBS = [["state", "c1"], ["create", "--bundle", "/nonexistent/bundle", "c1"], ["start", "c1"],
         ["kill", "c1", "KILL"], ["delete", "c1"], ["delete", "--force", "c1"], ["features"],
         ["doctor", "--json"], ["version"], ["run", "c1"], ["exec", "c1"]]


def _unwritable(tmp_path: Path) -> list[tuple[str, str]]:
    """(--log value, the start of the error) for logs that cannot be written: a missing
    directory, a directory, /dev/full; /proc/version (open refused to a user, writes
    refused to root).  A directory or a device is refused before it is opened."""
    return [(str(tmp_path / "nodir" / "log.json"),
             f"open log file {tmp_path / 'nodir' / 'log.json'}: No such file or directory"),
            (str(tmp_path), f"open log file {tmp_path}: a directory, not a regular file: "
                            "refusing it"),
            ("/dev/full", "open log file /dev/full: a character device, not a regular "
                          "file: refusing it"),
            ("/proc/version", "open log file /proc/version: Permission denied"
             if os.geteuid() else "write log file /proc/version: Input/output error"),
            (f"file:{tmp_path}", f"open log file {tmp_path}: a directory, not a regular "
                                 "file: refusing it")]


@pytest.fixture
def no_anchor(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every attempt to start an anchor, recorded instead."""
    from scrun_py.anchor import launch

    started: list[str] = []

    def fork(cls: object, conf: object) -> None:
        started.append("EarlyAnchor.fork")

    def late(*args: object, **kwargs: object) -> None:
        started.append("start_late")
        raise OSError(1, "no anchor in this test")

    monkeypatch.setattr(launch.EarlyAnchor, "fork", classmethod(fork))
    monkeypatch.setattr(launch, "start_late", late)
    return started


class TestUnwritableLog:
    @pytest.mark.parametrize("verb", VERBS, ids=" ".join)
    @pytest.mark.parametrize("entry", ["console script", "click"])
    def test_every_verb_fails_first(self, tmp_root: Path, no_anchor: list[str],
                                    verb: list[str], entry: str) -> None:
        """Each verb, through either entry, fails with one line, exit 1, before it acts:
        create starts no anchor, nothing appears in --root (runc and crun: exit 1,
        crun's words `open log file PATH: REASON`)."""
        for log, error in _unwritable(tmp_root.parent):
            argv = ["--root", str(tmp_root), "--log", log, *verb]
            if entry == "click":
                with (mock.patch("sys.stdout", new_callable=io.StringIO) as out,
                      mock.patch("sys.stderr", new_callable=io.StringIO) as err):
                    code = run(argv)
                got = (code, out.getvalue(), err.getvalue())
            else:
                got = _entry(argv)
            assert (1, "", f"scrun-py: {error}\n") == got, (log, verb)
        assert [] == no_anchor
        assert [] == os.listdir(tmp_root)

    def test_log_opened_before_the_verb(self, tmp_root: Path) -> None:
        """A usable --log is created (0644) by every verb, as runc and crun create it, and
        a successful command writes nothing to it."""
        log = tmp_root.parent / "log.json"
        assert (0, "") == _entry(["--root", str(tmp_root), "--log", str(log), "delete",
                                  "--force", "c1"])[:2]
        assert ("", 0o644) == (log.read_text(), log.stat().st_mode & 0o777)

    def test_without_log_nothing_is_opened(self, tmp_root: Path) -> None:
        """Without --log no file is opened (`state` is polled)."""
        with mock.patch("os.open", side_effect=AssertionError("opened")) as opened:
            from scrun_py.cli import fast_path

            fast_path.open_log(None)
        assert 0 == opened.call_count

    def test_lone_v_does_not_open_the_log(self) -> None:
        """A lone -v is runc's --version, which prints without opening --log."""
        code, out, _ = _entry(["--log", "/nonexistent/dir/log", "-v"])
        assert (0, f"scrun-py version {__version__}") == (code, out.splitlines()[0])


# -- 2. no arguments ---------------------------------------------------------------------------

class TestNoArguments:
    @pytest.mark.parametrize("argv", [[], ["--debug"], ["--root", "/tmp/x"]])
    def test_prints_help_exit_0(self, argv: list[str]) -> None:
        """No verb: the help on stdout and exit 0, as runc (it was `command not provided`,
        exit 2, and no word of --help)."""
        code, out, err = _entry(argv)
        assert (0, "") == (code, err)
        assert out.startswith("Usage: scrun-py [OPTIONS] [COMMAND] [ARGS]...")
        assert "Commands:" in out
        assert "  create " in out


# -- 3. the choices of --log-format in --help ----------------------------------------------------

def test_help_lists_log_format_choices() -> None:
    """--help shows --log-format's choices and its default."""
    code, out, _ = _entry(["--help"])
    assert 0 == code
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("--log-format"))
    assert "[text|json]" in line
    assert "[default: text]" in line


# -- 4. --version ---------------------------------------------------------------------------

class TestVersion:
    def test_lines(self) -> None:
        """runc's lines, adapted; only the first names `version` (dockerd takes any line
        holding the word for the runtime's version)."""
        code, out, err = _entry(["--version"])
        lines = out.splitlines()
        assert (0, "") == (code, err)
        assert 5 == len(lines)
        assert f"scrun-py version {__version__}" == lines[0]
        assert f"commit: {version.git_commit()}" == lines[1]
        assert f"spec: {OCI_SPEC_VERSION}" == lines[2]
        assert "python: {}.{}.{}".format(*sys.version_info[:3]) == lines[3]
        assert lines[4].startswith("slurm: ")
        assert ["version"] == [w for ln in lines for w in ln.split() if "version" in w]

    def test_commit_of_this_checkout(self) -> None:
        """From a git checkout, commit is HEAD's (it was `v0.1.0`)."""
        if not (REPO / ".git").exists() or shutil.which("git") is None:
            pytest.skip("not a git checkout")
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=False).stdout.strip()
        if not head:
            pytest.skip("git cannot read this checkout")
        assert head == version.git_commit()

    def _tree(self, tmp_path: Path) -> Path:
        tmp_path.mkdir(exist_ok=True)
        (tmp_path / "pyproject.toml").write_text("")
        (tmp_path / ".git" / "refs" / "heads").mkdir(parents=True)
        return tmp_path

    def test_commit_loose_ref(self, tmp_path: Path) -> None:
        top = self._tree(tmp_path)
        (top / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        (top / ".git" / "refs" / "heads" / "main").write_text(SHA + "\n")
        assert SHA == version.git_commit(str(top))

    def test_commit_packed_ref(self, tmp_path: Path) -> None:
        top = self._tree(tmp_path)
        (top / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        (top / ".git" / "packed-refs").write_text(
            f"# pack-refs with: peeled fully-peeled sorted\n{'f' * 40} refs/heads/other\n"
            f"{SHA} refs/heads/main\n")
        assert SHA == version.git_commit(str(top))

    def test_commit_detached(self, tmp_path: Path) -> None:
        top = self._tree(tmp_path)
        (top / ".git" / "HEAD").write_text(SHA + "\n")
        assert SHA == version.git_commit(str(top))

    def test_commit_linked_work_tree(self, tmp_path: Path) -> None:
        """A `git worktree` checkout: .git is a file naming its git dir, whose
        commondir holds the refs."""
        main = self._tree(tmp_path / "main")
        (main / ".git" / "refs" / "heads" / "topic").write_text(SHA + "\n")
        gitdir = main / ".git" / "worktrees" / "wt"
        gitdir.mkdir(parents=True)
        (gitdir / "HEAD").write_text("ref: refs/heads/topic\n")
        (gitdir / "commondir").write_text("../..\n")
        wt = tmp_path / "wt"
        wt.mkdir()
        (wt / "pyproject.toml").write_text("")
        (wt / ".git").write_text(f"gitdir: {gitdir}\n")
        assert SHA == version.git_commit(str(wt))

    @pytest.mark.parametrize("case", ["no .git", "no pyproject.toml", "broken ref"])
    def test_commit_unknown(self, tmp_path: Path, case: str) -> None:
        """An installed wheel (no source tree), or a .git that says nothing: unknown."""
        top = self._tree(tmp_path)
        (top / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        (top / ".git" / "refs" / "heads" / "main").write_text(SHA + "\n")
        if case == "no .git":
            shutil.rmtree(top / ".git")
        elif case == "no pyproject.toml":
            (top / "pyproject.toml").unlink()
        else:
            (top / ".git" / "refs" / "heads" / "main").write_text("garbage\n")
        assert "unknown" == version.git_commit(str(top))

    def _fake_srun(self, tmp_path: Path, body: str) -> dict[str, str]:
        bindir = tmp_path / "bin"
        bindir.mkdir()
        (bindir / "srun").write_text(f"#!/bin/sh\n{body}\n")
        (bindir / "srun").chmod(0o755)
        conf = tmp_path / "slurm.conf"
        conf.write_text("ClusterName=c\n")
        return {"PATH": str(bindir), "SLURM_CONF": str(conf)}

    def test_slurm_release(self, tmp_path: Path) -> None:
        env = self._fake_srun(tmp_path, 'echo "slurm-wlm 23.11.4"')
        assert "23.11.4" == version.slurm_release(env)

    @pytest.mark.parametrize("body", ['echo "srun: fatal: no conf" >&2; exit 1', "echo"])
    def test_slurm_release_failing(self, tmp_path: Path, body: str) -> None:
        assert "unknown" == version.slurm_release(self._fake_srun(tmp_path, body))

    def test_slurm_release_bounded(self, tmp_path: Path) -> None:
        """An srun that does not answer is killed after the timeout."""
        sleep = shutil.which("sleep") or "/bin/sleep"
        env = self._fake_srun(tmp_path, f"echo $$ > {tmp_path}/pid; exec {sleep} 60")
        started = time.monotonic()
        assert "unknown" == version.slurm_release(env, timeout_s=0.3)
        assert time.monotonic() - started < 10  # a hang guard, not a speed target
        pid = int((tmp_path / "pid").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)

    def test_slurm_release_missing_conf(self, tmp_path: Path) -> None:
        """A $SLURM_CONF naming no file: srun is not run (22.05's retries for 60 s)."""
        env = self._fake_srun(tmp_path, f"touch {tmp_path}/ran; echo slurm 22.05.8")
        env["SLURM_CONF"] = str(tmp_path / "missing.conf")
        assert "unknown" == version.slurm_release(env)
        assert not (tmp_path / "ran").exists()

    def test_no_srun(self, tmp_path: Path) -> None:
        assert "unknown" == version.slurm_release({"PATH": str(tmp_path)})

    def test_one_source_of_the_version(self) -> None:
        """pyproject.toml takes the version from scrun_py.__version__ (setuptools'
        dynamic version) instead of a copy of it."""
        project = tomllib.loads((REPO / "pyproject.toml").read_text())
        assert "version" not in project["project"]
        assert "version" in project["project"]["dynamic"]
        assert {"attr": "scrun_py.__version__"} == (
            project["tool"]["setuptools"]["dynamic"]["version"])


def _bundle(tmp_path: Path) -> Path:
    """A bundle create accepts (it is read before oci.conf)."""
    bundle = tmp_path / "bundle"
    (bundle / "rootfs" / "bin").mkdir(parents=True)
    (bundle / "rootfs" / "bin" / "true").touch(mode=0o755)  # create looks it up
    (bundle / "config.json").write_text(
        '{"ociVersion": "1.0.2", "process": {"args": ["true"], "cwd": "/"}, '
        '"root": {"path": "rootfs"}}')
    return bundle


class TestNoConfiguration:
    """create with no configuration names what is missing and how to point scrun-py at
    a configuration, and leaves nothing behind."""

    def test_nothing_at_all(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        conf = tmp_path / "etc" / "slurm.conf"
        root = tmp_path / "root"
        assert 1 == run(["--root", str(root), "-f", str(conf), "create", "--bundle",
                         str(_bundle(tmp_path)), "c1"])
        assert (f"scrun-py: oci.conf: not found: {tmp_path / 'etc' / 'oci.conf'} (it is read "
                f"beside the slurm.conf in use, and {conf} is missing too; name another "
                "slurm.conf with -f or SLURM_CONF)\n") == capsys.readouterr().err
        assert not root.exists() or [] == os.listdir(root)

    def test_slurm_conf_without_oci_conf(self, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
        conf = tmp_path / "slurm.conf"
        conf.write_text("ClusterName=c\n")
        assert 1 == run(["--root", str(tmp_path / "root"), "-f", str(conf), "create",
                         "--bundle", str(_bundle(tmp_path)), "c1"])
        assert (f"(it is read beside {conf}, the slurm.conf in use; name another slurm.conf "
                "with -f or SLURM_CONF)") in capsys.readouterr().err


def test_fatal_record_goes_to_the_file_log_names(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`--log file:PATH` is crun's spelling of PATH: a failed command's record goes to
    PATH, and `file:file:x` names the file `file:x`, never `x`."""
    from scrun_py.cli import fatal

    monkeypatch.chdir(tmp_path)
    assert 3 == fatal.fatal(["--log", "file:file:x", "state", "c1"], "boom", 3)
    assert os.path.exists(tmp_path / "file:x")
    assert not os.path.exists(tmp_path / "x")
