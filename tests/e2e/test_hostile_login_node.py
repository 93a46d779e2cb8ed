"""A hostile login node, every verb: scruntest2 plays another local user against
scruntest's default --root in a shared sticky directory (the /tmp fallback when there is
no XDG_RUNTIME_DIR), against the programs scrun-py runs, and against the command lines
of scruntest's processes.

Each attack has a control: the same steps on scruntest's own, genuine root work.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    SCRUN,
    VENV,
    Env,
    User,
    other_user,
    squeue,
    traces,
    wait_anchor,
)

pytestmark = pytest.mark.e2e

PYTHON = str(VENV / "bin" / "python")
# every verb, on the id the attacker planted ("c1") and on a regex
VERBS = [["state", "c1"], ["start", "c1"], ["kill", "c1", "TERM"], ["kill", "--regex", "."],
         ["delete", "c1"], ["delete", "--force", "c1"], ["delete", "--force", "--regex", "."]]


def _as(user: User, argv: list[str], cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """Run argv as `user`; output through files (an anchor keeps create's stdio open)."""
    out, err = cwd / f".{user.name}.out", cwd / f".{user.name}.err"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.run(user.argv(argv), env=user.env(**extra), cwd=cwd, stdout=fo,
                              stderr=fe, timeout=120, stdin=subprocess.DEVNULL, check=False)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.read_text(),
                                       err.read_text())


def _one_error_line(res: subprocess.CompletedProcess[str]) -> str:
    assert 1 == res.returncode, (res.args, res.stdout, res.stderr)
    lines = res.stderr.splitlines()
    assert 1 == len(lines), res.stderr
    assert "Traceback" not in res.stderr
    return lines[0]


@pytest.fixture
def victim(user_env: Env) -> Iterator[tuple[Env, Path, Path]]:
    """scruntest with a home of precious files (and a directory `c1` in it, which looks
    like a half-created container) and a shared sticky directory, /tmp's stand-in."""
    env = user_env
    home = env.work / "home"
    (home / "precious" / ".ssh").mkdir(parents=True)
    (home / "precious" / ".ssh" / "id_ed25519").write_text("private key")
    (home / "c1").mkdir()
    (home / "c1" / "notes").write_text("keep me")
    env.chown(home)
    shared = env.work / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    yield env, home, shared


def _intact(home: Path) -> None:
    assert "private key" == (home / "precious" / ".ssh" / "id_ed25519").read_text()
    assert "keep me" == (home / "c1" / "notes").read_text()


def _victim_verb(env: Env, root: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return _as(env.user, [str(SCRUN), "--root", str(root), "--log", str(env.log),
                          "--log-format", "json", *argv], env.work)


class TestPlantedRoot:
    def test_root_made_first_with_a_symlink_in_it(self, victim: tuple[Env, Path, Path]) -> None:
        """scruntest2 makes scruntest's root (0755) and puts `c1` in it, a symlink to a
        directory in scruntest's home: every verb refuses the root with one line that
        names its owner, and the home is intact."""
        env, home, shared = victim
        attacker = other_user()
        root = shared / f"scrun-{env.user.uid}"
        assert 0 == _as(attacker, ["mkdir", "-m", "755", str(root)], env.work).returncode
        assert 0 == _as(attacker, ["ln", "-s", str(home / "c1"), str(root / "c1")],
                        env.work).returncode
        for argv in VERBS:
            line = _victim_verb(env, root, argv)
            assert (f"root directory {root} belongs to uid {attacker.uid}, not to uid "
                    f"{env.user.uid}: refusing it") in _one_error_line(line), argv
        created = env.create("c9", env.bundle(["true"]))  # in env.root: the control below
        assert 0 == created.rc, created.stderr()
        for verb in ("create", "run"):
            res = _victim_verb(env, root, [verb, "--bundle", str(env.work / "bundle"), "c8"])
            assert (f"root directory {root} belongs to uid {attacker.uid}"
                    in _one_error_line(res)), verb
        assert "refusing it" in str(env.errors()[-1]["msg"])
        _intact(home)
        assert (root / "c1").is_symlink()
        # the control: the same verbs on scruntest's own root act on the real container
        assert "created" == env.state("c9")["status"]
        assert 0 == env.run("start", "c9").returncode
        assert 0 == created.wait_exit()
        assert 0 == env.run("delete", "c9").returncode
        assert [] == traces(env, "c9")

    def test_root_is_a_symlink_to_the_home(self, victim: tuple[Env, Path, Path]) -> None:
        """scruntest2 makes scruntest's root a symlink to scruntest's home: `delete
        --force precious`, `delete --force --regex .` and every other verb refuse it."""
        env, home, shared = victim
        attacker = other_user()
        root = shared / f"scrun-{env.user.uid}"
        assert 0 == _as(attacker, ["ln", "-s", str(home), str(root)], env.work).returncode
        for argv in [*VERBS, ["delete", "--force", "precious"]]:
            line = _victim_verb(env, root, argv)
            assert f"root directory {root} is a symbolic link: refusing it" in \
                _one_error_line(line), argv
        _intact(home)
        # the control: the home itself as the root is the caller's, and the same delete
        # there removes a directory that create left half-made (0700, nothing foreign in
        # it); c1, which holds the caller's notes, it keeps
        assert 0 == _as(env.user, ["mkdir", "-m", "700", str(home / "c2")], env.work).returncode
        assert 0 == _victim_verb(env, home, ["delete", "c2"]).returncode
        assert not (home / "c2").exists()
        res = _victim_verb(env, home, ["delete", "--force", "c1"])
        assert "not removing it" in _one_error_line(res)
        _intact(home)

    def test_planted_record_and_socket_get_nothing(self, victim: tuple[Env, Path, Path]
                                                   ) -> None:
        """scruntest2 makes the root 0777 and plants `c2`: a state.json naming a live
        process of theirs and an anchor.sock they listen on.  state, start, kill and
        delete refuse; nothing reaches the attacker's socket."""
        env, _, shared = victim
        attacker = other_user()
        root = shared / f"scrun-{env.user.uid}"
        got = shared / "attacker-got"
        listener = env.work / "listener.py"
        listener.write_text(
            "import json, os, socket, sys, time\n"
            "root, got = sys.argv[1], sys.argv[2]\n"
            "os.makedirs(root + '/c2', mode=0o777)\n"
            "os.chmod(root, 0o777); os.chmod(root + '/c2', 0o777)\n"
            "rec = {'id': 'c2', 'bundle': '/b', 'rootfs': '/b/rootfs', 'status': 'created',\n"
            "       'anchor_pid': os.getpid(), 'owner': 'x', 'created': 'now'}\n"
            "open(root + '/c2/state.json', 'w').write(json.dumps(rec))\n"
            "os.chmod(root + '/c2/state.json', 0o666)\n"
            "s = socket.socket(socket.AF_UNIX); s.bind(root + '/c2/anchor.sock')\n"
            "os.chmod(root + '/c2/anchor.sock', 0o777); s.listen(8); s.settimeout(30)\n"
            "open(got, 'w').close(); os.chmod(got, 0o666)\n"
            "print('ready', flush=True)\n"
            "while True:\n"
            "    c, _ = s.accept(); c.settimeout(2)\n"
            "    try: data = c.recv(65536)\n"
            "    except OSError: data = b''\n"
            "    open(got, 'ab').write(data)\n"
            "    c.sendall(b'{\"v\":1,\"ok\":true,\"job_id\":1}\\n'); c.close()\n")
        listener.chmod(0o644)
        proc = subprocess.Popen(attacker.argv([PYTHON, str(listener), str(root), str(got)]),
                                env=attacker.env(), stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            with proc.stdout:
                assert "ready" == proc.stdout.readline().strip()
            for argv in (["state", "c2"], ["start", "c2"], ["kill", "c2", "TERM"],
                         ["delete", "c2"], ["delete", "--force", "c2"]):
                line = _one_error_line(_victim_verb(env, root, argv))
                assert f"root directory {root} belongs to uid {attacker.uid}" in line, argv
            time.sleep(0.2)
            assert "" == got.read_text()
        finally:
            proc.kill()
            proc.wait()


class TestPrograms:
    def test_no_salloc_or_srun_from_the_working_directory(self, user_env: Env) -> None:
        """The image sets SCRUN_WORKING_DIR (allowed by default) to a directory that holds
        programs named salloc and srun, and the caller's PATH has an empty and a relative
        entry first: Slurm's own salloc and srun run (the job is real and the container
        prints), the planted ones never."""
        env = user_env
        attacker = other_user()
        evil = env.work / "evil"
        evil.mkdir(mode=0o755)
        marker = env.work / "planted-ran"
        for name in ("salloc", "srun", "scancel", "scontrol", "squeue"):
            prog = evil / name
            prog.write_text(f"#!/bin/sh\necho {name} >> {marker}\nexit 1\n")
            prog.chmod(0o755)
        subprocess.run(["chown", "-R", f"{attacker.uid}:{attacker.gid}", str(evil)], check=True)
        path = env.user.env()["PATH"]
        bundle = env.bundle(["echo", "genuine"], env=[f"SCRUN_WORKING_DIR={evil}"])
        created = env.create("w", bundle, env=env.user.env(PATH=f":.:{path}"))
        assert 0 == created.rc, created.stderr()
        job_id = created.job_id()
        assert str(job_id) in squeue("-o", "%i")
        assert 0 == env.run("start", "w", env=env.user.env(PATH=f":.:{path}")).returncode
        assert 0 == created.wait_exit()
        assert "genuine\n" == created.stdout()
        assert not marker.exists(), marker.read_text()
        assert 0 == env.run("delete", "w").returncode
        assert [] == traces(env, "w")


class TestCommandLines:
    SECRET = "hunter2-0f1e2d3c"

    def _other_users_view(self, env: Env) -> dict[int, str]:
        """Every process's command line as scruntest2 reads /proc."""
        script = ("import os, json\n"
                  "out = {}\n"
                  "for p in os.listdir('/proc'):\n"
                  "    if p.isdigit():\n"
                  "        try: out[p] = open(f'/proc/{p}/cmdline', 'rb').read()"
                  ".decode(errors='replace')\n"
                  "        except OSError: pass\n"
                  "print(json.dumps(out))\n")
        res = _as(other_user(), [PYTHON, "-c", script], env.work)
        assert 0 == res.returncode, res.stderr
        return {int(k): v for k, v in json.loads(res.stdout).items()}

    @pytest.mark.parametrize("namespace", [False, True], ids=["forked", "behind-unshare"])
    def test_spec_not_on_any_command_line(self, user_env: Env, namespace: bool) -> None:
        """While the anchor waits for `start`, scruntest2 reads every /proc/*/cmdline:
        the container's args, its annotations and an imported SCRUN_* value appear in
        none, also where create runs as root of a user namespace (rootless podman: the
        anchor is a new interpreter behind unshare).  A 200 kB annotation works there."""
        env = user_env
        bundle = env.bundle(["echo", f"--password={self.SECRET}"],
                            env=[f"SCRUN_COMMENT=c-{self.SECRET}"],
                            annotations={"note": f"a-{self.SECRET}", "big": "x" * 200_000})
        prefix = ["unshare", "--user", "--map-root-user", "--"] if namespace else []
        pid_file = env.work / "w.pid"
        base = [str(SCRUN), "--root", str(env.root)]
        res = _as(env.user, [*prefix, *base, "create", "--bundle", str(bundle.path),
                             "--pid-file", str(pid_file), "w"], env.work)
        assert 0 == res.returncode, res.stderr
        pid = int(pid_file.read_text())
        env.anchors.append(pid)
        seen = self._other_users_view(env)
        assert seen.get(pid), "the control: scruntest2 reads the anchor's cmdline"
        leaks = {p: c[:200] for p, c in seen.items() if self.SECRET in c}
        assert {} == leaks
        # (not started: every annotation becomes a SCRUN_ANNOTATION_* variable of the
        # step, and the kernel takes no single variable over 128 KiB)
        res = _as(env.user, [*prefix, *base, "delete", "--force", "w"], env.work)
        assert 0 == res.returncode, res.stderr
        wait_anchor(pid)
        assert [] == traces(env, "w")

