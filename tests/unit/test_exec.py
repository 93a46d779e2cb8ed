"""`exec`: the process it reads, the helper step it runs (a stand-in srun on PATH), its
exit status, --detach with --pid-file, and runc's refusals."""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path

import pytest

from scrun_py.base.errors import ScrunError
from scrun_py.commands import exec as exec_verb
from scrun_py.slurm import node_step
from scrun_py.slurm.argv import NODE_PATH_PROLOGUE
from tests.unit.cli_run import run
from tests.unit.test_ps import World


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    w = World(tmp_path, monkeypatch)
    # the stand-in runs the container's command here: the last word is `sh -c COMMAND`
    # whose tail after the container id is the process's args
    w.srun('eval "$(printf "%s" "$SCRUN_TEST_AFTER")"')
    return w


def process_json(tmp_path: Path, **fields: object) -> str:
    doc = {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["echo", "hi"],
           "env": ["PATH=/bin", "A=1"], "cwd": "/"}
    doc.update(fields)
    path = tmp_path / "process.json"
    path.write_text(json.dumps(doc))
    return str(path)


class TestStep:
    def test_argv(self, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                  capsys: pytest.CaptureFixture[str]) -> None:
        """One helper task beside the container's step, on the job's first node (task
        0's; srun alone may choose another), running the node runtime's exec with
        process.json's env and cwd, then its args."""
        world.container()
        monkeypatch.setenv("SCRUN_TEST_AFTER", "exit 0")
        assert 0 == run(["--root", str(world.root), "exec", "--process",
                         process_json(tmp_path, args=["sh", "-c", "echo 100%"]), "c1"])
        argv = world.argv()
        assert ["--jobid=42", "--job-name=scrun-exec", "--overlap", "--quiet", "--nodes=1",
                "--ntasks=1", "--relative=0", "--", "/bin/sh", "-c"] == argv[:-1]
        cid = '"${SLURMD_NODENAME}"."$(id -un)".42.3.0'
        crun = 'crun --rootless=true --root=/tmp/ocistate-"$(id -un)"'
        assert (f"{NODE_PATH_PROLOGUE}n=0\n"
                f"until {crun} state {cid} >/dev/null 2>&1 || [ $n -ge 100 ]; do sleep 0.1; "
                "n=$((n+1)); done\n"
                "_p=$$; _s=$(cat /proc/$_p/stat) && _s=${_s##*) } && set -- $_s && "
                'echo "scrun-py exec runtime: $$ ${20} $SLURMD_NODENAME" >&2\n'
                f"exec {crun} exec --env=PATH=/bin --env=A=1 --cwd=/ {cid} sh -c "
                "'echo 100%'") == argv[-1]

    @pytest.mark.parametrize(("after", "code"), [("exit 0", 0), ("exit 7", 7),
                                                 ("kill -USR1 $$", 128 + 10)])
    def test_exit_status(self, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         after: str, code: int) -> None:
        """srun's status, 128+N when a signal N ends it."""
        world.container()
        monkeypatch.setenv("SCRUN_TEST_AFTER", after)
        assert code == run(["--root", str(world.root), "exec", "-p", process_json(tmp_path),
                            "c1"])

    def test_srun_exit_report_dropped(self, world: World, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch,
                                      capfd: pytest.CaptureFixture[str]) -> None:
        world.container()
        monkeypatch.setenv("SCRUN_TEST_AFTER", "echo out; echo err >&2; echo "
                           "'srun: error: n1: task 0: Exited with exit code 3' >&2; exit 3")
        assert 3 == run(["--root", str(world.root), "exec", "-p", process_json(tmp_path),
                         "c1"])
        out, err = capfd.readouterr()
        assert ("out\n", "err\n") == (out, err)

    def test_positional_form(self, world: World, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
        """`exec ID CMD...`: options after ID are CMD's; env and cwd from config.json."""
        bundle = tmp_path / "b"
        bundle.mkdir()
        (bundle / "config.json").write_text(json.dumps(
            {"process": {"args": ["x"], "env": ["E=2"], "cwd": "/w"}}))
        world.container()
        record = world.root / "c1" / "state.json"
        doc = json.loads(record.read_text())
        doc["bundle"] = str(bundle)
        record.write_text(json.dumps(doc))
        monkeypatch.setenv("SCRUN_TEST_AFTER", "exit 0")
        assert 0 == run(["--root", str(world.root), "exec", "c1", "ls", "-l", "--tty"])
        assert world.argv()[-1].endswith(
            "exec --env=E=2 --cwd=/w \"${SLURMD_NODENAME}\".\"$(id -un)\".42.3.0 ls -l --tty")

    def test_detach_pid_file(self, world: World, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
        """--detach returns 0 at once; --pid-file holds the supervisor's pid (bare, no
        newline), a child of the caller that exits with the process's status."""
        world.container()
        monkeypatch.setenv("SCRUN_TEST_AFTER", "sleep 0.3; exit 5")
        pid_file = tmp_path / "exec.pid"
        started = time.monotonic()
        assert 0 == run(["--root", str(world.root), "exec", "-p", process_json(tmp_path),
                         "--detach", "--pid-file", str(pid_file), "c1"])
        assert time.monotonic() - started < 0.3
        pid = int(pid_file.read_text())
        _, status = os.waitpid(pid, 0)
        assert 5 == os.waitstatus_to_exitcode(status)


class TestRefusals:
    @pytest.mark.parametrize(("status", "words"), [
        ("stopped", "cannot exec in a stopped container"),
        ("created", "cannot exec in a created container"),
    ])
    def test_not_running(self, world: World, tmp_path: Path, status: str, words: str,
                         capsys: pytest.CaptureFixture[str]) -> None:
        world.container(status=status)
        assert 1 == run(["--root", str(world.root), "exec", "-p", process_json(tmp_path),
                         "c1"])
        assert capsys.readouterr().err.startswith(f"scrun-py: {words}")
        assert not world.calls.exists()

    def test_unknown(self, world: World, tmp_path: Path,
                     capsys: pytest.CaptureFixture[str]) -> None:
        assert 1 == run(["--root", str(world.root), "exec", "-p", process_json(tmp_path),
                         "nope"])
        assert "does not exist" in capsys.readouterr().err

    @pytest.mark.parametrize(("fields", "words"), [
        ({"args": []}, "args must not be empty"),
        ({"cwd": ""}, "Cwd property must not be empty"),
        ({"cwd": "rel"}, "Cwd must be an absolute path"),
        ({"env": "A=1"}, "env must be a list of strings"),
    ])
    def test_bad_process(self, tmp_path: Path, fields: dict[str, object], words: str) -> None:
        with pytest.raises(ScrunError, match=words):
            exec_verb.load_process(process_json(tmp_path, **fields), [], False, "/b")

    def test_missing_process_file(self, tmp_path: Path) -> None:
        with pytest.raises(ScrunError, match="no such file or directory"):
            exec_verb.load_process(str(tmp_path / "none.json"), [], False, "/b")


class TestWords:
    def test_tty_user_and_quoting(self) -> None:
        proc = exec_verb.Process(["a"], ["K=v w", "P=5%"], "/d x", True, uid=1000, gid=10)
        assert ["exec", "--tty", "'--env=K=v w'", "--env=P=5%%", "'--cwd=/d x'",
                "--user=1000:10"] == proc.runtime_words()
        assert ["--env=K=v w"] == shlex.split(proc.runtime_words()[2])


class TestSiteRuntime:
    def test_exec_runtime_setting(self, world: World, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
        """scrun-py.toml's `[exec] runtime` replaces RunTimeKill's runtime and options;
        the container id pattern stays RunTimeKill's."""
        (world.slurm_conf.parent / "scrun-py.toml").write_text(
            '[exec]\nruntime = "/opt/crun --root=/r/%U"\n')
        world.container()
        monkeypatch.setenv("SCRUN_TEST_AFTER", "exit 0")
        assert 0 == run(["--root", str(world.root), "exec", "-p", process_json(tmp_path),
                         "c1"])
        assert world.argv()[-1].splitlines()[-1] == (
            'exec /opt/crun --root=/r/"$(id -u)" exec --env=PATH=/bin --env=A=1 --cwd=/ '
            '"${SLURMD_NODENAME}"."$(id -un)".42.3.0 echo hi')

    @pytest.mark.parametrize("text", ['[exec]\nruntime = ""\n', "[exec]\nruntime = 3\n",
                                      '[exec]\nruntme = "crun"\n'])
    def test_bad_setting(self, tmp_path: Path, text: str) -> None:
        from scrun_py.base.errors import ConfigError
        from scrun_py.site import site_conf

        (tmp_path / "scrun-py.toml").write_text(text)
        with pytest.raises(ConfigError, match=r"\[exec\]"):
            site_conf.exec_runtime(str(tmp_path / "slurm.conf"))


def squeue(world: World, body: str) -> Path:
    """A stand-in squeue on PATH that records its arguments and runs `body`."""
    calls = world.bin.parent / "squeue-calls"
    script = world.bin / "squeue"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {calls}\n{body}\n")
    script.chmod(0o755)
    return calls


def annotate(world: World, annotations: dict[str, str]) -> None:
    record = world.root / "c1" / "state.json"
    doc = json.loads(record.read_text())
    doc["annotations"] = annotations
    record.write_text(json.dumps(doc))


NODE_KEY = "org.scrun-py.exec.node"


class TestNodeChoice:
    @pytest.mark.parametrize(("env", "annotations", "chosen"), [
        ([], {}, None),
        (["SCRUN_EXEC_NODE=n2"], {}, ("n2", "SCRUN_EXEC_NODE of the process")),
        (["SCRUN_EXEC_NODE=n2", "SCRUN_EXEC_NODE=n3"], {}, ("n3",
                                                            "SCRUN_EXEC_NODE of the process")),
        ([], {NODE_KEY: "n3"}, ("n3", f"the container's annotation {NODE_KEY}")),
        (["SCRUN_EXEC_NODE=n2"], {NODE_KEY: "n3"}, ("n2", "SCRUN_EXEC_NODE of the process")),
        (["SCRUN_EXEC_NODE="], {NODE_KEY: "n3"}, ("n3", f"the container's annotation {NODE_KEY}")),
        (["SCRUN_EXEC_NODE="], {NODE_KEY: ""}, None),
        (["SCRUN_EXEC_NODES=n2", "XSCRUN_EXEC_NODE=n2"], {}, None),
    ])
    def test_exec_node(self, env: list[str], annotations: dict[str, str],
                       chosen: tuple[str, str] | None) -> None:
        """The process's SCRUN_EXEC_NODE (its last), else the annotation; an empty value
        is none; None is task 0's node."""
        assert chosen == node_step.exec_node(env, annotations)

    @pytest.mark.parametrize(("answer", "where"), [
        ("echo 'n[2-4]'", "--nodelist=n2"),  # the step's first node, task 0's
        ("exit 1", "--relative=0"),  # squeue does not say: the job's first node
        ("echo 'n[x'", "--relative=0"),
    ])
    def test_task_0_node_by_default(self, world: World, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch, answer: str,
                                    where: str) -> None:
        """No node named: the first node of the container's step, as squeue gives it
        (srun's --relative=0 alone did not always pick it on 24.11); --relative=0 when
        squeue does not say."""
        calls = squeue(world, answer)
        world.container()
        monkeypatch.setenv("SCRUN_TEST_AFTER", "exit 0")
        assert 0 == run(["--root", str(world.root), "exec", "-p", process_json(tmp_path),
                         "c1"])
        argv = world.argv()
        assert [where] == [a for a in argv if a.startswith(("--nodelist", "--rel"))]
        assert "--steps=42.3" in calls.read_text().split()

    @pytest.mark.parametrize(("env", "annotations"), [
        (["PATH=/bin", "SCRUN_EXEC_NODE=n3"], {}),
        (["PATH=/bin"], {NODE_KEY: "n3"}),
        (["PATH=/bin", "SCRUN_EXEC_NODE=n3"], {NODE_KEY: "n2"}),
    ])
    def test_named_node(self, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        env: list[str], annotations: dict[str, str]) -> None:
        """A node of the container's step (squeue's list for job.step) gets the step:
        `--nodelist=n3`; the container's id there is expanded by the node's shell."""
        calls = squeue(world, "echo 'n[1-3]'")
        world.container()
        annotate(world, annotations)
        monkeypatch.setenv("SCRUN_TEST_AFTER", "exit 0")
        assert 0 == run(["--root", str(world.root), "exec", "-p",
                         process_json(tmp_path, env=env), "c1"])
        argv = world.argv()
        assert ["--nodelist=n3"] == [a for a in argv[:argv.index("--")]
                                     if a.startswith(("--nodelist", "--relative"))]
        assert '"${SLURMD_NODENAME}"."$(id -un)".42.3.0 echo hi' in argv[-1]
        assert ["--noheader", "--steps=42.3", "--format=%N"] == calls.read_text().split()

    @pytest.mark.parametrize(("body", "words"), [
        ("echo 'n[1-3]'",
         "scrun-py: exec: node 'n9' (SCRUN_EXEC_NODE of the process) is not one of the "
         "container's nodes (job 42: n[1-3])\n"),
        ("echo 'n[1-3'",
         "scrun-py: exec: node 'n9' (SCRUN_EXEC_NODE of the process) is not one of the "
         "container's nodes (job 42: n[1-3)\n"),
        ("echo 'squeue: error: Invalid job id specified' >&2; exit 1",
         "scrun-py: exec: cannot tell the nodes of job 42's container step (squeue did not "
         "say) to check node 'n9' (SCRUN_EXEC_NODE of the process)\n"),
    ])
    def test_not_a_node_of_the_job(self, world: World, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str], body: str,
                                   words: str) -> None:
        """A node outside the container's step, or nodes squeue cannot give: one line,
        exit 1, no step, no pid file, no supervisor (--detach)."""
        squeue(world, body)
        world.container()
        pid_file = tmp_path / "exec.pid"
        assert 1 == run(["--root", str(world.root), "exec", "-p",
                         process_json(tmp_path, env=["SCRUN_EXEC_NODE=n9"]), "--detach",
                         "--pid-file", str(pid_file), "c1"])
        assert words == capsys.readouterr().err
        assert not world.calls.exists()
        assert not pid_file.exists()

    def test_annotation_named_node_outside(self, world: World, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
        squeue(world, "echo n1")
        world.container()
        annotate(world, {NODE_KEY: "n2"})
        assert 1 == run(["--root", str(world.root), "exec", "-p", process_json(tmp_path),
                         "c1"])
        assert (f"scrun-py: exec: node 'n2' (the container's annotation {NODE_KEY}) is not "
                "one of the container's nodes (job 42: n1)\n") == capsys.readouterr().err
        assert not world.calls.exists()
