"""What scrun-py reads from Slurm's client commands (slurm/parse.py)."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import time

import pytest

from scrun_py.slurm import parse


class TestParse:
    @pytest.mark.parametrize(("text", "expected"), [
        ("slurm 22.05.8\n", (22, 5)), ("slurm-wlm 24.11.1", (24, 11)), ("slurm 25.05.0-1", (25, 5)),
        ("", None), ("srun: fatal: no config", None), ("slurm 22.05.8 (local)", None)])
    def test_version(self, text: str, expected: tuple[int, int] | None) -> None:
        assert expected == parse.parse_version(text)

    def test_hostlist(self) -> None:
        """squeue's host list, as oci/taskenv.py's own copy reads it."""
        text = "n[1-3],login,a[08-10],c[5]"
        assert ["n1", "n2", "n3", "login", "a08", "a09", "a10", "c5"] == parse.expand_hostlist(
            text)
        from scrun_py.oci import taskenv

        assert taskenv.expand_hostlist(text) == parse.expand_hostlist(text)
        for bad in ("n[1-x]", "n[1-3", "n[1]x[2]"):
            with pytest.raises(ValueError, match="host list not understood"):
                parse.expand_hostlist(bad)

    def test_slurm_time(self) -> None:
        """squeue's %e is local time; Unknown/NONE (no limit) is None."""
        when = parse.parse_slurm_time("2026-11-29T12:45:00\n")
        assert when is not None
        assert "2026-11-29 12:45:00" == time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
        assert parse.parse_slurm_time("Unknown") is None

    def test_step_ids(self) -> None:
        text = "55.0|scrun\n55.1|scrun-signal\n55.extern|extern\n55.3|scrun\n"
        assert [0, 3] == parse.parse_step_ids(text, "scrun")
        assert [] == parse.parse_step_ids("", "scrun")

    @pytest.mark.parametrize(("text", "ids"), [
        ("2026-11-29T12:45:00|1001|1002", (1001, 1002)), ("NONE|x|y", (None, None)),
        ("", (None, None))])
    def test_job_info(self, text: str, ids: tuple[int | None, int | None]) -> None:
        assert ids == parse.parse_job_info(text)[1:]


class TestPending:
    @pytest.mark.parametrize(("text", "expected"), [
        ("PENDING|Resources\n", ("PENDING", "Resources")),
        ("PENDING|ReqNodeNotAvail, UnavailableNodes:vm\n",
         ("PENDING", "ReqNodeNotAvail, UnavailableNodes:vm")),
        ("RUNNING|None\n", ("RUNNING", "None")),
        ("PENDING|\n", ("PENDING", "")),
        ("", None),
        ("slurm_load_jobs error: Invalid job id specified\n", None)])
    def test_job_reason(self, text: str, expected: tuple[str, str] | None) -> None:
        """squeue's `%T|%r`: the state, and the reason whole (it may hold spaces and
        commas); nothing for a job squeue no longer knows."""
        assert expected == parse.parse_job_reason(text)

    @pytest.mark.parametrize(("line", "job_id"), [
        ("salloc: Pending job allocation 135", 135),
        ("salloc: Granted job allocation 135", None),
        ("salloc: job 135 queued and waiting for resources", None)])
    def test_pending_line(self, line: str, job_id: int | None) -> None:
        """salloc's line for a job slurmctld queued instead of granting it at once."""
        m = parse.PENDING_RE.search(line)
        assert job_id == (int(m.group(1)) if m else None)


class TestMaxTasksPerNode:
    @pytest.mark.parametrize(("text", "expected"), [
        ("1", 1), ("2(x3)", 2), ("2(x3),1", 2), ("1,3", 3), ("", 1), ("junk", 1)])
    def test_largest_count(self, text: str, expected: int) -> None:
        """SLURM_TASKS_PER_NODE's largest per-node count bounds the local task ids."""
        assert expected == parse.max_tasks_per_node(text)


class TestStepLaunchFailure:
    @pytest.mark.parametrize(("line", "reason"), [
        (b"srun: error: Unable to create step for job 7: Connection reset by peer\n",
         "Connection reset by peer"),
        (b"srun: error: Unable to confirm allocation for job 2000136: Connection reset by "
         b"peer\n", "Connection reset by peer"),
        (b"srun: error: vm: task 0: Exited with exit code 1\n", None),
        (b"Unable to create step for job 7: x\n", None)])
    def test_reason(self, line: bytes, reason: str | None) -> None:
        assert reason == parse.step_launch_failure(line)

    def test_transient_only_when_slurmctld_did_not_answer(self) -> None:
        assert parse.transient_launch_failure("Unable to contact slurm controller (connect "
                                              "failure)")
        assert not parse.transient_launch_failure(
            "Requested node configuration is not available")


#: what 22.05's `scontrol ping` prints while slurmctld is down
PING_DOWN = ("Slurmctld(primary) at ctl is DOWN\n"
             "*****************************************\n"
             "** RESTORE SLURMCTLD DAEMON TO SERVICE **\n"
             "*****************************************\n")


class TestPing:
    def test_up(self) -> None:
        assert (True, "Slurmctld(primary) at ctl is UP", None) == parse.parse_ping(
            0, "Slurmctld(primary) at ctl is UP\n")

    def test_down(self) -> None:
        """The DOWN lines, not the banner of asterisks under them."""
        assert (False, "Slurmctld(primary) at ctl is DOWN", None) == parse.parse_ping(
            1, PING_DOWN)

    def test_backup_down_too(self) -> None:
        text = ("Slurmctld(primary) at a is DOWN\nSlurmctld(backup) at b is DOWN\n"
                + PING_DOWN.split("\n", 1)[1])
        assert (False, "Slurmctld(primary) at a is DOWN; Slurmctld(backup) at b is DOWN",
                None) == parse.parse_ping(1, text)

    def test_other_output(self) -> None:
        """No DOWN line: the last line said; nothing said: the exit status."""
        assert (False, "scontrol: error: x", None) == parse.parse_ping(1, "scontrol: error: x\n")
        assert (False, "exit 7", None) == parse.parse_ping(7, "")

    def test_exit_zero_without_up(self) -> None:
        assert (False, "odd", None) == parse.parse_ping(0, "odd\n")

    def test_munge(self) -> None:
        """This host cannot authenticate: the munge error, without scontrol's prefix."""
        text = ("scontrol: error: Munge encode failed: Failed to access socket\n"
                "slurm_ping: Protocol authentication error\n")
        assert (False, "slurm_ping: Protocol authentication error",
                "Munge encode failed: Failed to access socket") == parse.parse_ping(1, text)
        assert (False, "x authentication error", "munge") == parse.parse_ping(
            1, "x authentication error\n")
