"""The planted-program attack, without a cluster: the job's working directory (an image
chooses it, SCRUN_WORKING_DIR) holds programs another user left there, named as those
scrun-py and its shells run (env, timeout, sh, unshare, flock, the Slurm commands, what
the node scripts run), and PATH has an empty entry, the current directory.  None of them
may run: not from the allocation's holder script, not from the abandon script, not from
a node's shell, not through procs.run, the Lua commands, unshare or the node's taskenv.

Stand-ins in a directory of their own, on PATH after the empty entry, play salloc, srun
(it runs the node's command here, in the directory it was started in, as slurmstepd
does), squeue, scancel and crun; the real /bin/sh runs every script.
"""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scrun_py.base import procs
from scrun_py.base.threads import Cancel
from scrun_py.slurm import argv as slurm_argv
from scrun_py.slurm.backend import Allocation, AllocRequest
from scrun_py.slurm.cli_backend import CliSlurm

#: what the planted directory holds, each writing a marker when it runs
PLANTED = ("env", "timeout", "sh", "unshare", "flock", "srun", "salloc", "squeue", "scancel",
           "crun", "id", "sleep", "sed", "true", "python3", "scrun-py-planted")
SYSTEM_PATH = "/usr/bin:/bin"
STANDINS = {
    "salloc": 'echo "salloc: Granted job allocation 55" >&2\n'
              'while [ "$1" != "--" ]; do shift; done; shift\n'
              'SLURM_JOB_ID=55 exec "$@"',
    # as slurmstepd: the command runs in srun's directory, with srun's environment
    "srun": 'echo "srun $*" >> "$LOG"\n'
            'while [ "$1" != "--" ]; do shift; done; shift\n'
            'SLURMD_NODENAME=n1 exec "$@"',
    "squeue": 'echo "squeue $*" >> "$LOG"',
    "scancel": 'echo "scancel $*" >> "$LOG"',
    "crun": 'echo "crun $*" >> "$LOG"',
}


class Attack:
    """The planted directory (the working directory), the stand-ins, the markers."""

    def __init__(self, tmp_path: Path) -> None:
        self.evil = tmp_path / "evilwd"
        self.good = tmp_path / "bin"
        self.markers = tmp_path / "markers"
        self.log = tmp_path / "log"
        for d in (self.evil, self.good, self.markers):
            d.mkdir()
        for name in PLANTED:
            _script(self.evil / name, f'echo "$0 $*" >> {self.markers / name}')
        for name, body in STANDINS.items():
            _script(self.good / name, body)
        # the empty entry first: a PATH search there finds the planted program first
        self.path = f":{self.good}:{SYSTEM_PATH}"

    def env(self, **extra: str) -> dict[str, str]:
        return {"PATH": self.path, "LOG": str(self.log), "HOME": "/", **extra}

    def ran(self) -> list[str]:
        """The planted programs that ran."""
        return sorted(p.name for p in self.markers.iterdir())

    def logged(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


def _script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def attack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Attack:
    """The planted directory is the current one, and PATH starts with an empty entry."""
    found = Attack(tmp_path)
    monkeypatch.chdir(found.evil)
    for name, value in found.env().items():
        monkeypatch.setenv(name, value)
    return found


def _backend(attack: Attack) -> CliSlurm:
    return CliSlurm(runtime_kill="crun --root=/r kill -a %n.%u.%j.%s.%t",
                    version_probe=lambda: (23, 2))


class TestLoginNode:
    def test_the_attack_works_without_the_resolver(self, attack: Attack) -> None:
        """The set-up is a real attack: a shell's own search runs the planted env."""
        subprocess.run(["/bin/sh", "-c", "env -0 >/dev/null"], env=attack.env(),
                       cwd=attack.evil, check=False)
        assert ["env"] == attack.ran()

    def test_the_allocation_holder(self, attack: Attack) -> None:
        """salloc in the job's directory (SCRUN_WORKING_DIR, salloc's --chdir): the holder
        script reports the job environment with the real env, then exits with the code
        the anchor sends."""
        slurm = _backend(attack)
        alloc = slurm.allocate(AllocRequest([f"--chdir={attack.evil}"], attack.env(),
                                            lambda _job: None, 10), Cancel())
        assert ("55", str(attack.evil)) == (alloc.env["SLURM_JOB_ID"], alloc.env["PWD"])
        slurm.release(alloc, 3, 10)
        assert [] == attack.ran()

    def test_the_abandon_script(self, attack: Attack, tmp_path: Path) -> None:
        """The anchor died (the holder's stdin at EOF): the holder runs the abandon
        script in the job's directory, which kills the container through srun and the
        node's runtime, every program found outside that directory."""
        script = _backend(attack).abandon_script(Allocation(55, {}, True), 2)
        assert script is not None
        abandon = tmp_path / "on-abandon.sh"
        abandon.write_text(script)
        holder = slurm_argv.holder_script(procs.resolve_program("env", attack.env()))
        res = subprocess.run(["/bin/sh", "-c", holder], cwd=attack.evil, check=False,
                             env=attack.env(**{slurm_argv.ABANDON_ENV: str(abandon)}),
                             stdin=subprocess.DEVNULL, capture_output=True)
        assert 1 == res.returncode
        assert slurm_argv.READY_MARKER in res.stdout
        assert [] == attack.ran()
        user = procs.user_name(os.getuid())
        assert f"crun --root=/r kill n1.{user}.55.2.0 9" == attack.logged()[-1]

    def test_procs_run_of_a_bare_name(self, attack: Attack) -> None:
        """procs.run finds the program in PATH's absolute entries; one that is only in
        the working directory is not started (127, saying why)."""
        assert 0 == procs.run(["scancel", "55"]).status
        assert ["scancel 55"] == attack.logged()
        res = procs.run(["scrun-py-planted"])
        assert (procs.NOT_STARTED_STATUS, "not found on PATH (relative PATH entries are "
                                          "ignored)") == (res.status, res.error)
        assert b"scrun-py-planted: not found on PATH" in res.output
        assert [] == attack.ran()

    def test_the_slurm_queries_and_signals(self, attack: Attack) -> None:
        """squeue, scancel and the signal's helper step (srun, then the node's crun)."""
        slurm = _backend(attack)
        assert slurm.job_state(55) is None  # the stand-in squeue prints nothing
        slurm.signal(55, 2, 15, attack.env(), lambda: True)
        slurm.scancel_signal(55, 2, 10)
        assert [] == attack.ran()
        assert any(ln.startswith("crun --root=/r kill n1.") for ln in attack.logged())

    def test_unshare(self, attack: Attack, monkeypatch: pytest.MonkeyPatch) -> None:
        """As root of a user namespace the anchor runs behind unshare: found on PATH's
        absolute entries (/usr/bin), not in the working directory."""
        from scrun_py.anchor import launch

        monkeypatch.setattr(os, "getuid", lambda: 0)
        monkeypatch.setattr(procs, "ns_root_host_id", lambda kind: 1000)
        prefix = launch.userns_prefix()
        assert procs.resolve_program("unshare", {"PATH": SYSTEM_PATH}) == prefix[0]
        assert ["--user", "--map-user=1000", "--map-group=1000", "--"] == prefix[1:]

    def test_lua_commands(self, attack: Attack) -> None:
        """A Lua allocator command runs under /bin/sh with PATH's absolute entries only."""
        from scrun_py.hooks import _builtins

        status, out = _builtins.run_command(
            ["/bin/sh", "-c", 'env >/dev/null; flock -h >/dev/null; timeout 1 true; '
                              'echo "$PATH"'], attack.env())
        assert (0, f"{attack.good}:{SYSTEM_PATH}\n".encode()) == (status, out)
        assert [] == attack.ran()
        assert "/bin:/usr/bin" == _builtins.command_env({"PATH": ":rel:."})["PATH"]

    def test_the_version_probe(self, attack: Attack) -> None:
        """`--version` runs srun found on PATH's absolute entries only."""
        from scrun_py.base import version

        _script(attack.good / "srun", 'echo "slurm 23.11.4"')
        assert "23.11.4" == version.slurm_release(attack.env())
        assert [] == attack.ran()


class TestComputeNode:
    @pytest.mark.parametrize(("path", "kept"), [
        (f":{SYSTEM_PATH}", SYSTEM_PATH), (f"rel:.:{SYSTEM_PATH}:", SYSTEM_PATH),
        ("", "/bin:/usr/bin"), (":rel:.", "/bin:/usr/bin")])
    def test_the_prologue_keeps_the_absolute_entries(self, attack: Attack, path: str,
                                                     kept: str) -> None:
        """A node's shell (NODE_PATH_PROLOGUE first) finds the node's programs, never
        the planted ones, whatever PATH the step brings."""
        script = slurm_argv.node_script(
            'id -un >/dev/null; sh -c : ; flock -h >/dev/null; sleep 0; '
            'x=$(sed -n p </dev/null); echo "$PATH"; echo "$_r$_p$_d"')
        res = subprocess.run(["/bin/sh", "-c", script], env={"PATH": path},
                             cwd=attack.evil, capture_output=True, text=True, check=False)
        assert (0, f"{kept}\n\n", "") == (res.returncode, res.stdout, res.stderr)
        assert [] == attack.ran()

    def test_taskenv_runs_the_runtime_from_an_absolute_entry(self, attack: Attack,
                                                            tmp_path: Path) -> None:
        """taskenv (oci.conf's RunTimeRun, on the node) execs the runtime command found
        on PATH's absolute entries; one only in the step's directory is not run."""
        run = [sys.executable, "-m", "scrun_py.oci.taskenv", "n1", "0", str(tmp_path), "--"]
        env = {**attack.env(), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        ok = subprocess.run([*run, "env"], env=env, cwd=attack.evil, capture_output=True,
                            text=True, check=False)
        assert 0 == ok.returncode and f"PATH={attack.path}" in ok.stdout.splitlines()
        missing = subprocess.run([*run, "scrun-py-planted"], env=env, cwd=attack.evil,
                                 capture_output=True, text=True, check=False)
        assert 127 == missing.returncode
        assert ("taskenv: cannot run scrun-py-planted: not found on PATH (relative PATH "
                "entries are ignored)") == missing.stderr.splitlines()[-1]
        assert [] == attack.ran()
