"""Unit tests for scrun_py.slurm.options: SCRUN_* variables → salloc/srun options."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import pytest

from scrun_py.slurm.argv import build_salloc_argv
from scrun_py.slurm.options import (
    CONTAINER_ID_ENV,
    JOB_NAME,
    MAX_JOB_NAME,
    SCRUN_OPTIONS,
    flag_is_set,
    ignored_warning,
    job_options,
)

# scrun(1)'s INPUT ENVIRONMENT VARIABLES, written out independently of SCRUN_OPTIONS so that a
# typo in either one fails a test.  "step" marks Slurm's srun-only (✗) options,
# which scrun-py applies to the container step instead of the allocation.
VALUED: dict[str, tuple[str, str]] = {
    "SCRUN_ACCOUNT": ("--account", "alloc"),
    "SCRUN_ACCTG_FREQ": ("--acctg-freq", "alloc"),
    "SCRUN_BURST_BUFFER": ("--bb", "alloc"),
    "SCRUN_CLUSTER_CONSTRAINT": ("--cluster-constraint", "alloc"),
    "SCRUN_CLUSTERS": ("--clusters", "alloc"),
    "SCRUN_CONSTRAINT": ("--constraint", "alloc"),
    "SCRUN_CORE_SPEC": ("--core-spec", "alloc"),
    "SCRUN_CPU_BIND": ("--cpu-bind", "step"),
    "SCRUN_CPU_FREQ_REQ": ("--cpu-freq", "alloc"),
    "SCRUN_CPUS_PER_GPU": ("--cpus-per-gpu", "alloc"),
    "SCRUN_CPUS_PER_TASK": ("--cpus-per-task", "alloc"),
    "SCRUN_DELAY_BOOT": ("--delay-boot", "alloc"),
    "SCRUN_DEPENDENCY": ("--dependency", "alloc"),
    "SCRUN_DISTRIBUTION": ("--distribution", "alloc"),
    "SCRUN_EPILOG": ("--epilog", "step"),
    "SCRUN_GPU_BIND": ("--gpu-bind", "alloc"),
    "SCRUN_GPU_FREQ": ("--gpu-freq", "alloc"),
    "SCRUN_GPUS": ("--gpus", "alloc"),
    "SCRUN_GPUS_PER_NODE": ("--gpus-per-node", "alloc"),
    "SCRUN_GPUS_PER_SOCKET": ("--gpus-per-socket", "alloc"),
    "SCRUN_GPUS_PER_TASK": ("--gpus-per-task", "alloc"),
    "SCRUN_GRES_FLAGS": ("--gres-flags", "alloc"),
    "SCRUN_GRES": ("--gres", "alloc"),
    "SCRUN_HINT": ("--hint", "alloc"),
    "SCRUN_JOB_NODELIST": ("--nodelist", "alloc"),
    "SCRUN_LICENSES": ("--licenses", "alloc"),  # scrun-py extension
    "SCRUN_JOB_NUM_NODES": ("--nodes", "alloc"),
    "SCRUN_MEM_BIND": ("--mem-bind", "alloc"),
    "SCRUN_MEM_PER_CPU": ("--mem-per-cpu", "alloc"),
    "SCRUN_MEM_PER_GPU": ("--mem-per-gpu", "alloc"),
    "SCRUN_MEM_PER_NODE": ("--mem", "alloc"),
    "SCRUN_MPI_TYPE": ("--mpi", "step"),
    "SCRUN_NCORES_PER_SOCKET": ("--cores-per-socket", "alloc"),
    "SCRUN_NETWORK": ("--network", "alloc"),
    "SCRUN_NSOCKETS_PER_NODE": ("--sockets-per-node", "alloc"),
    "SCRUN_NTASKS": ("--ntasks", "alloc"),
    "SCRUN_NTASKS_PER_CORE": ("--ntasks-per-core", "alloc"),
    "SCRUN_NTASKS_PER_GPU": ("--ntasks-per-gpu", "alloc"),
    "SCRUN_NTASKS_PER_NODE": ("--ntasks-per-node", "alloc"),
    "SCRUN_NTASKS_PER_TRES": ("--ntasks-per-tres", "alloc"),
    "SCRUN_OPEN_MODE": ("--open-mode", "step"),
    "SCRUN_PARTITION": ("--partition", "alloc"),
    "SCRUN_PROFILE": ("--profile", "alloc"),
    "SCRUN_PROLOG": ("--prolog", "step"),
    "SCRUN_QOS": ("--qos", "alloc"),
    "SCRUN_RESERVATION": ("--reservation", "alloc"),
    "SCRUN_SIGNAL": ("--signal", "alloc"),
    "SCRUN_SLURMD_DEBUG": ("--slurmd-debug", "step"),
    "SCRUN_TASK_EPILOG": ("--task-epilog", "step"),
    "SCRUN_TASK_PROLOG": ("--task-prolog", "step"),
    "SCRUN_THREAD_SPEC": ("--thread-spec", "alloc"),
    "SCRUN_THREADS_PER_CORE": ("--threads-per-core", "alloc"),
    "SCRUN_THREADS": ("--threads", "step"),
    "SCRUN_TIMELIMIT": ("--time", "alloc"),
    "SCRUN_TRES_BIND": ("--tres-bind", "alloc"),
    "SCRUN_TRES_PER_TASK": ("--tres-per-task", "alloc"),
    "SCRUN_WCKEY": ("--wckey", "alloc"),
}
FLAGS: dict[str, tuple[str, str]] = {
    "SCRUN_EXACT": ("--exact", "step"),
    "SCRUN_EXCLUSIVE": ("--exclusive", "alloc"),
    "SCRUN_LABELIO": ("--label", "step"),
    "SCRUN_OVERCOMMIT": ("--overcommit", "alloc"),
    "SCRUN_OVERLAP": ("--overlap", "step"),
    "SCRUN_SPREAD_JOB": ("--spread-job", "alloc"),
    "SCRUN_UNBUFFEREDIO": ("--unbuffered", "step"),
    "SCRUN_USE_MIN_NODES": ("--use-min-nodes", "alloc"),
}
NAME = ("SCRUN_JOB_NAME",)
IGNORED = ("SCRUN_POWER",)
SPECIAL = ("SCRUN_REMOTE_CWD", "SCRUN_WORKING_DIR", "SCRUN_REQ_SWITCH", "SCRUN_WAIT4SWITCH")


class TestOptionTable:
    def test_table_covers_every_variable(self) -> None:
        """SCRUN_OPTIONS holds exactly the variables of scrun(1), no more, no fewer."""
        expected = set(VALUED) | set(FLAGS) | set(NAME) | set(IGNORED) | set(SPECIAL)
        assert expected == set(SCRUN_OPTIONS)

    @pytest.mark.parametrize("name", sorted(VALUED))
    def test_valued_variable(self, name: str) -> None:
        """A valued variable becomes `--option=value` on the allocation or the step."""
        option, where = VALUED[name]
        out = job_options({name: "v1"})
        expected = [f"{option}=v1"]
        assert (expected, []) == ((out.alloc, out.step) if where == "alloc"
                                  else (out.step, out.alloc))

    @pytest.mark.parametrize("name", sorted(FLAGS))
    def test_flag_variable(self, name: str) -> None:
        """A flag variable that is set becomes the bare option on the allocation or the step."""
        option, where = FLAGS[name]
        out = job_options({name: ""})
        assert ([option], []) == ((out.alloc, out.step) if where == "alloc"
                                  else (out.step, out.alloc))

    @pytest.mark.parametrize("name", sorted(FLAGS))
    def test_flag_variable_unset(self, name: str) -> None:
        """A flag variable set to 0 adds no option at all."""
        out = job_options({name: "0"})
        assert ([], []) == (out.alloc, out.step)

    @pytest.mark.parametrize("name", IGNORED)
    def test_ignored_variable(self, name: str) -> None:
        """The removed SCRUN_POWER is ignored (with a warning), not applied."""
        out = job_options({name: "x"})
        assert ([], [], [name]) == (out.alloc, out.step, out.ignored)

    def test_step_keeps_slurms_name(self) -> None:
        """The container's step is named `scrun`, as Slurm's scrun names it."""
        assert "scrun" == JOB_NAME


class TestJobName:
    """The job is named after its container, so `squeue --me` tells containers apart;
    SCRUN_JOB_NAME names it instead (Slurm's scrun overrides it with `scrun`)."""

    def test_named_after_the_container(self) -> None:
        """Without SCRUN_JOB_NAME the job's name is the container id, first in salloc's
        options, and salloc's argv then has no other name."""
        out = job_options({"SCRUN_TIMELIMIT": "5"}, "c0ffee")
        assert ["--job-name=c0ffee", "--time=5"] == out.alloc
        argv = build_salloc_argv(out.alloc, "/usr/bin/env", "/usr/bin/salloc")
        assert ["--job-name=c0ffee"] == [a for a in argv if a.startswith("--job-name")]

    def test_scrun_job_name_wins(self) -> None:
        """A usable SCRUN_JOB_NAME names the job, kept verbatim (spaces, '=')."""
        out = job_options({"SCRUN_JOB_NAME": "my job=1"}, "c0ffee")
        assert (["--job-name=my job=1"], []) == (out.alloc, out.ignored)

    def test_no_container_id_keeps_scrun(self) -> None:
        """Without a container id (and SCRUN_JOB_NAME) salloc's argv names the job
        `scrun`."""
        out = job_options({})
        assert [] == out.alloc
        argv = build_salloc_argv(out.alloc, "/usr/bin/env", "/usr/bin/salloc")
        assert ["--job-name=scrun"] == [a for a in argv if a.startswith("--job-name")]

    @pytest.mark.parametrize(("value", "why"), [
        ("", "empty"), ("  ", "empty"), ("a\nb", "control"), ("tab\there", "control"),
        ("x" * (MAX_JOB_NAME + 1), "longer"), ("é" * (MAX_JOB_NAME // 2 + 1), "longer")])
    def test_unusable_name_falls_back(self, value: str, why: str) -> None:
        """A SCRUN_JOB_NAME Slurm would refuse (empty, a control character, more bytes
        than slurmctld takes) is ignored with a warning: the container id names the job."""
        out = job_options({"SCRUN_JOB_NAME": value}, "c0ffee")
        assert (["--job-name=c0ffee"], ["SCRUN_JOB_NAME"]) == (out.alloc, out.ignored)
        assert "named after the container" in ignored_warning("SCRUN_JOB_NAME")
        assert why in ignored_warning("SCRUN_JOB_NAME")

    def test_longest_name_is_taken(self) -> None:
        """A name of exactly MAX_JOB_NAME bytes is Slurm's to take."""
        name = "n" * MAX_JOB_NAME
        assert [f"--job-name={name}"] == job_options({"SCRUN_JOB_NAME": name}, "c").alloc

    def test_container_id_for_salloc(self) -> None:
        """The container id goes to salloc's environment, where salloc >= 23.02 takes it
        as the job's container id (22.05 has no such field and ignores it)."""
        assert {CONTAINER_ID_ENV: "c0ffee"} == job_options({}, "c0ffee").env
        assert "SALLOC_CONTAINER_ID" == CONTAINER_ID_ENV
        assert {} == job_options({}).env


class TestUnrelated:
    def test_unrelated_environment_is_ignored(self) -> None:
        """Variables outside the table, including other SCRUN_* ones, produce nothing."""
        out = job_options({"PATH": "/bin", "SLURM_JOB_ID": "7", "SCRUN_DEBUG": "debug",
                           "SCRUN_NOT_AN_OPTION": "1"})
        assert ([], []) == (out.alloc, out.step)

    def test_values_are_kept_verbatim(self) -> None:
        """Values with spaces, commas and '=' are passed through unchanged as one argument."""
        out = job_options({"SCRUN_CONSTRAINT": "a&b|c", "SCRUN_GRES": "gpu:2,nic=x y"})
        assert ["--constraint=a&b|c", "--gres=gpu:2,nic=x y"] == out.alloc

    def test_several_variables_in_stable_order(self) -> None:
        """The allocation and step lists are sorted by variable name, chdir and switches last."""
        out = job_options({"SCRUN_TIMELIMIT": "10", "SCRUN_ACCOUNT": "acct",
                           "SCRUN_WORKING_DIR": "/w", "SCRUN_REQ_SWITCH": "2",
                           "SCRUN_PARTITION": "debug", "SCRUN_MPI_TYPE": "pmix",
                           "SCRUN_CPU_BIND": "cores"})
        assert ["--account=acct", "--partition=debug", "--time=10", "--chdir=/w",
                "--switches=2"] == out.alloc
        assert ["--cpu-bind=cores", "--mpi=pmix"] == out.step


class TestWorkingDir:
    def test_remote_cwd_alone(self) -> None:
        """SCRUN_REMOTE_CWD alone sets the job's --chdir."""
        assert ["--chdir=/r"] == job_options({"SCRUN_REMOTE_CWD": "/r"}).alloc

    def test_working_dir_alone(self) -> None:
        """SCRUN_WORKING_DIR alone sets the job's --chdir."""
        assert ["--chdir=/w"] == job_options({"SCRUN_WORKING_DIR": "/w"}).alloc

    def test_working_dir_wins(self) -> None:
        """With both set, SCRUN_WORKING_DIR wins and --chdir appears once."""
        out = job_options({"SCRUN_WORKING_DIR": "/w", "SCRUN_REMOTE_CWD": "/r"})
        assert ["--chdir=/w"] == out.alloc

    def test_empty_working_dir_falls_back(self) -> None:
        """An empty SCRUN_WORKING_DIR does not hide SCRUN_REMOTE_CWD."""
        out = job_options({"SCRUN_WORKING_DIR": "", "SCRUN_REMOTE_CWD": "/r"})
        assert ["--chdir=/r"] == out.alloc

    def test_no_working_dir(self) -> None:
        """Without either variable the job work dir is left unset (Slurm 23.11.4+)."""
        assert [] == job_options({}).alloc


class TestSwitches:
    def test_count_only(self) -> None:
        """SCRUN_REQ_SWITCH alone is the switch count."""
        assert ["--switches=2"] == job_options({"SCRUN_REQ_SWITCH": "2"}).alloc

    def test_count_with_wait_time(self) -> None:
        """SCRUN_WAIT4SWITCH adds the maximum wait as `count@time`."""
        out = job_options({"SCRUN_REQ_SWITCH": "2", "SCRUN_WAIT4SWITCH": "10:00"})
        assert ["--switches=2@10:00"] == out.alloc

    def test_wait_time_only(self) -> None:
        """A wait time without a count uses a count of 1."""
        assert ["--switches=1@5"] == job_options({"SCRUN_WAIT4SWITCH": "5"}).alloc

    def test_empty_values(self) -> None:
        """Empty switch variables add nothing."""
        out = job_options({"SCRUN_REQ_SWITCH": "", "SCRUN_WAIT4SWITCH": ""})
        assert [] == out.alloc


class TestFlags:
    @pytest.mark.parametrize("value", ["", "yes", "YES", " yes ", "1", "2", "-1", " 7 "])
    def test_set(self, value: str) -> None:
        """Empty, `yes` (any case) or a non-zero integer means the flag is set."""
        assert flag_is_set(value) is True

    @pytest.mark.parametrize("value", ["0", "00", "no", "NO", "false", "true", "on", "x"])
    def test_unset(self, value: str) -> None:
        """Zero, `no` and any other word mean the flag is unset."""
        assert flag_is_set(value) is False

    @pytest.mark.parametrize("value", ["yes", "1"])
    def test_flag_values_in_job_options(self, value: str) -> None:
        """A flag variable set to `yes` or 1 adds the bare option."""
        assert ["--overcommit"] == job_options({"SCRUN_OVERCOMMIT": value}).alloc

    @pytest.mark.parametrize("value", ["no", "0"])
    def test_flag_unset_in_job_options(self, value: str) -> None:
        """A flag variable set to `no` or 0 adds nothing."""
        assert [] == job_options({"SCRUN_OVERCOMMIT": value}).alloc

    @pytest.mark.parametrize(("value", "expected"), [
        ("user", "--exclusive=user"), ("MCS", "--exclusive=mcs"), ("topo", "--exclusive=topo"),
        ("yes", "--exclusive"),
    ])
    def test_exclusive_modes(self, value: str, expected: str) -> None:
        """SCRUN_EXCLUSIVE also takes salloc's user/mcs/topo modes, lowercased."""
        assert [expected] == job_options({"SCRUN_EXCLUSIVE": value}).alloc
