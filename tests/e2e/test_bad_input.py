"""Bad input beyond tests/e2e/test_errors.py: each case fails with one clear line on
stderr, an error record in --log and a non-zero exit (or runc's success), and leaves
nothing: no job, anchor, socket, spool dir or pid file.  Case ids: docs/reliability.md."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import Bundle, Created, Env, run_in_work, traces

pytestmark = pytest.mark.e2e


def assert_failed(env: Env, res: subprocess.CompletedProcess[str], needle: str,
                  cid: str = "c", rc: int | None = None) -> None:
    """The contract of every bad input: one line, one error record, non-zero, no traces."""
    assert 0 != res.returncode, res.stderr
    if rc is not None:
        assert rc == res.returncode
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert 1 == len(lines), res.stderr
    assert needle in lines[0], lines[0]
    errors = env.errors()
    assert errors, "no error record in --log"
    assert {"level", "msg", "time"} <= set(errors[-1])
    assert needle in str(errors[-1]["msg"])
    assert lines[0].endswith(str(errors[-1]["msg"]))
    assert [] == traces(env, cid)


def create(env: Env, bundle: Bundle | Path, cid: str = "c", *extra: str,
           conf: Path | None = None, extra_env: dict[str, str] | None = None,
           ) -> subprocess.CompletedProcess[str]:
    path = bundle.path if isinstance(bundle, Bundle) else bundle
    return run_in_work(env, "create", "--bundle", str(path), "--pid-file",
                       str(env.work / f"{cid}.pid"), *extra, cid, conf=conf,
                       extra_env=extra_env)


def edit_config(bundle: Bundle, edit: object) -> None:
    cfg = bundle.config()
    edit(cfg)  # type: ignore[operator]
    bundle.config_file.write_text(json.dumps(cfg))


def running(env: Env, cid: str) -> Created:
    bundle = env.bundle(["sh", "-c", "echo started; exec sleep 300"], name=f"b-{cid}")
    created = env.create(cid, bundle)
    assert 0 == created.rc, created.stderr()
    assert 0 == env.run("start", cid).returncode
    deadline = time.monotonic() + 60
    while "started" not in created.stdout():
        assert time.monotonic() < deadline, created.stderr()
        time.sleep(0.1)
    return created


def stop_and_delete(env: Env, created: Created) -> None:
    res = env.run("kill", created.cid, "KILL")
    assert 0 == res.returncode, (res.stderr, created.stderr(), env.log_records())
    assert 0 != created.wait_exit(timeout=60)
    assert 0 == env.run("delete", created.cid).returncode
    assert [] == traces(env, created.cid)


class TestBundle:
    @pytest.mark.case("BI-02")
    def test_bundle_is_a_file(self, env: Env) -> None:
        """`--bundle` names a regular file."""
        f = env.work / "file"
        f.write_text("x")
        assert_failed(env, create(env, f), "not a directory")

    @pytest.mark.case("BI-03")
    def test_config_json_missing(self, env: Env) -> None:
        """A bundle without config.json."""
        bundle = env.bundle(["true"])
        bundle.config_file.unlink()
        assert_failed(env, create(env, bundle), "config.json not found")

    @pytest.mark.case("BI-05")
    def test_config_json_not_an_object(self, env: Env) -> None:
        """config.json is valid JSON but an array."""
        bundle = env.bundle(["true"])
        bundle.config_file.write_text("[1, 2]")
        assert_failed(env, create(env, bundle), "config.json must be a JSON object")

    @pytest.mark.case("BI-07")
    def test_args_empty(self, env: Env) -> None:
        """process.args is an empty list."""
        bundle = env.bundle(["true"])
        edit_config(bundle, lambda c: c["process"].update(args=[]))
        assert_failed(env, create(env, bundle), "process.args")

    @pytest.mark.case("BI-08")
    def test_root_path_missing(self, env: Env) -> None:
        """root.path missing."""
        bundle = env.bundle(["true"])
        edit_config(bundle, lambda c: c["root"].pop("path"))
        assert_failed(env, create(env, bundle), "root.path is required")

    @pytest.mark.case("BI-09")
    def test_env_not_strings(self, env: Env) -> None:
        """process.env holds a number."""
        bundle = env.bundle(["true"])
        edit_config(bundle, lambda c: c["process"].update(env=[42, "A=b"]))
        assert_failed(env, create(env, bundle), "process.env.0")

    @pytest.mark.case("BI-10")
    def test_rootfs_missing(self, env: Env) -> None:
        """root.path names a directory that does not exist."""
        bundle = env.bundle(["true"])
        edit_config(bundle, lambda c: c["root"].update(path="nosuchrootfs"))
        assert_failed(env, create(env, bundle), "is not a directory")

    @pytest.mark.case("BI-11")
    def test_unreadable_bundle(self, user_env: Env) -> None:
        """The bundle directory is mode 000 (as the ordinary user: root reads anyway)."""
        env = user_env
        bundle = env.bundle(["true"])
        os.chmod(bundle.path, 0)
        try:
            assert_failed(env, create(env, bundle), "config.json is not readable")
        finally:
            os.chmod(bundle.path, 0o755)

    @pytest.mark.case("BI-12")
    def test_terminal_without_console_socket(self, env: Env) -> None:
        """process.terminal without --console-socket (stdin is not a tty)."""
        bundle = env.bundle(["true"], terminal=True)
        assert_failed(env, create(env, bundle), "no --console-socket")


OCI_CONF_RUN = (
    'RunTimeQuery="crun --rootless=true --root=/tmp/ocistate-%u state %n.%u.%j.%s.%t"\n'
    'RunTimeKill="crun --rootless=true --root=/tmp/ocistate-%u kill -a %n.%u.%j.%s.%t"\n'
    'RunTimeDelete="crun --rootless=true --root=/tmp/ocistate-%u delete --force '
    '%n.%u.%j.%s.%t"\n'
    'RunTimeRun="crun --rootless=true --root=/tmp/ocistate-%u run --bundle %b '
    '%n.%u.%j.%s.%t"\n')


class TestSiteConfig:
    @pytest.mark.case("BI-14")
    def test_oci_conf_bad_value(self, env: Env, conf_dir: Path) -> None:
        """An oci.conf value outside its domain."""
        (conf_dir / "oci.conf").write_text(OCI_CONF_RUN + "CreateEnvFile=sometimes\n")
        assert_failed(env, create(env, env.bundle(["true"]), conf=conf_dir / "slurm.conf"),
                      "CreateEnvFile")

    @pytest.mark.case("BI-15")
    def test_oci_conf_exclusive_runtime_keys(self, env: Env, conf_dir: Path) -> None:
        """RunTimeRun together with RunTimeCreate/RunTimeStart."""
        (conf_dir / "oci.conf").write_text(
            OCI_CONF_RUN + 'RunTimeCreate="crun create --bundle %b %n.%j"\n'
            'RunTimeStart="crun start %n.%j"\n')
        assert_failed(env, create(env, env.bundle(["true"]), conf=conf_dir / "slurm.conf"),
                      "mutually exclusive")

    @pytest.mark.case("BI-16")
    def test_oci_conf_missing(self, env: Env, conf_dir: Path) -> None:
        """No oci.conf next to slurm.conf."""
        (conf_dir / "oci.conf").unlink()
        assert_failed(env, create(env, env.bundle(["true"]), conf=conf_dir / "slurm.conf"),
                      "oci.conf")

    @pytest.mark.case("BI-18")
    def test_lua_error_while_loading(self, env: Env, conf_dir: Path) -> None:
        """scrun.lua that raises at load time."""
        (conf_dir / "scrun.lua").write_text('error("site script is broken")\n')
        assert_failed(env, create(env, env.bundle(["true"]), conf=conf_dir / "slurm.conf"),
                      "site script is broken")

    @pytest.mark.case("BI-19")
    def test_lua_override_missing(self, env: Env) -> None:
        """SCRUN_PY_LUA names a file that does not exist."""
        missing = str(env.work / "nope.lua")
        assert_failed(env, create(env, env.bundle(["true"]),
                                  extra_env={"SCRUN_PY_LUA": missing}),
                      "scrun.lua not found")

    @pytest.mark.case("BI-22")
    def test_non_numeric_node_count(self, env: Env) -> None:
        """SCRUN_JOB_NUM_NODES that is not a number: salloc's reason is reported."""
        bundle = env.bundle(["true"], env=["SCRUN_JOB_NUM_NODES=many"])
        res = create(env, bundle)
        assert_failed(env, res, "salloc")

    @pytest.mark.case("BI-23")
    def test_bad_alloc_timeout(self, env: Env) -> None:
        """SCRUN_PY_ALLOC_TIMEOUT that is not a number."""
        assert_failed(env, create(env, env.bundle(["true"]),
                                  extra_env={"SCRUN_PY_ALLOC_TIMEOUT": "later"}),
                      "SCRUN_PY_ALLOC_TIMEOUT: not a number")


class TestSignals:
    @pytest.mark.case("BI-24")
    def test_unknown_signal_name(self, env: Env) -> None:
        """Unknown signal names on a running container: refused, container unaffected."""
        created = running(env, "sig")
        for name in ("SIGFOO", "NOPE"):
            res = run_in_work(env, "kill", "sig", name)
            assert 0 != res.returncode
            assert 1 == len(res.stderr.splitlines()), res.stderr
            assert "unknown signal" in res.stderr
            assert "unknown signal" in str(env.errors()[-1]["msg"])
        assert "running" == env.state("sig")["status"]
        stop_and_delete(env, created)

    @pytest.mark.case("BI-25")
    def test_out_of_range_signal_number(self, env: Env) -> None:
        """Signal numbers 0, 65, 99999 on a running container: refused, unaffected."""
        created = running(env, "sig")
        for num in ("0", "65", "99999"):
            res = run_in_work(env, "kill", "sig", num)
            assert 0 != res.returncode
            assert 1 == len(res.stderr.splitlines()), res.stderr
            assert f"invalid signal: {num}" in res.stderr
            assert f"invalid signal: {num}" == env.errors()[-1]["msg"]
        assert "running" == env.state("sig")["status"]
        stop_and_delete(env, created)


class TestIds:
    @pytest.mark.case("BI-30")
    def test_dot_id(self, env: Env) -> None:
        """`.` is a path component, not an id."""
        assert_failed(env, create(env, env.bundle(["true"]), "."),
                      "invalid container ID format", cid=".")

    @pytest.mark.case("BI-32")
    def test_id_of_256_bytes(self, env: Env) -> None:
        """256 characters: longer than a file name may be."""
        assert_failed(env, create(env, env.bundle(["true"]), "x" * 256),
                      "invalid container ID format: too long", cid="x")

    @pytest.mark.case("BI-33")
    @pytest.mark.parametrize("bad", [b"c\n1", b"c\xff1", b"c 1", b"c;1"])
    def test_id_with_odd_bytes(self, env: Env, bad: bytes) -> None:
        """A newline, an undecodable byte, a space, a `;`: every verb refuses.  (NUL
        cannot be tested: execve() arguments are C strings, so no caller can pass one.)"""
        bundle = env.bundle(["true"])
        for verb in (["create", "--bundle", str(bundle.path)], ["state"], ["delete"]):
            argv = [os.fsencode(a) for a in env.cmd(*verb)] + [b"--", bad]
            res = subprocess.run(argv, env=env.user.env(), cwd=env.work, capture_output=True,
                                 timeout=60, stdin=subprocess.DEVNULL)
            assert 0 != res.returncode
            err = res.stderr.decode(errors="replace")
            assert 1 == len(err.splitlines()), err
            assert "invalid container ID format" in err
            assert "invalid container ID format" in str(env.errors()[-1]["msg"])
        assert [] == traces(env)


class TestRoot:
    @pytest.mark.case("BI-34")
    def test_root_is_a_file(self, env: Env) -> None:
        """--root names a regular file."""
        env.root.write_text("")
        env.chown(env.root)
        res = create(env, env.bundle(["true"]))
        env.root.unlink()
        assert_failed(env, res, "cannot create root directory")

    @pytest.mark.case("BI-35")
    def test_root_not_writable(self, user_env: Env) -> None:
        """--root inside a directory the user may not write."""
        env = user_env
        locked = env.work / "locked"
        locked.mkdir(mode=0o755)  # owned by root
        env.root = locked / "root"
        assert_failed(env, create(env, env.bundle(["true"])), "Permission denied")

    @pytest.mark.case("BI-36")
    def test_root_of_200_characters(self, env: Env) -> None:
        """A 200-character --root works: full lifecycle (the socket is bound through
        /proc/self/fd, so sun_path's 108 bytes are not a limit)."""
        base = str(env.work / "r")
        env.root = Path(base + "x" * (200 - len(base)))
        assert 200 == len(str(env.root))
        bundle = env.bundle(["sh", "-c", "echo long-root; exit 5"])
        created = env.create("lr", bundle)
        assert 0 == created.rc, created.stderr()
        assert "created" == env.state("lr")["status"]
        assert 0 == env.run("start", "lr").returncode
        assert 5 == created.wait_exit()
        assert "long-root\n" == created.stdout()
        assert "stopped" == env.state("lr")["status"]
        assert 0 == env.run("delete", "lr").returncode
        assert [] == traces(env, "lr")
        assert [] == env.errors()


class TestUsage:
    @pytest.mark.case("BI-37")
    def test_pid_file_in_missing_directory(self, env: Env) -> None:
        """--pid-file in a directory that does not exist: refused before any job."""
        res = run_in_work(env, "create", "--bundle", str(env.bundle(["true"]).path),
                          "--pid-file", str(env.work / "nodir" / "c.pid"), "c")
        assert_failed(env, res, "pid file directory does not exist")

    @pytest.mark.case("BI-38")
    @pytest.mark.parametrize("verb", [["create", "--bundle", "."], ["start"], ["state"],
                                      ["kill"], ["delete"], ["delete", "--force"]])
    def test_missing_id(self, env: Env, verb: list[str]) -> None:
        """A verb without its container id is a usage error (exit 2)."""
        assert_failed(env, run_in_work(env, *verb), "Missing argument 'CONTAINER_ID'", rc=2)

    @pytest.mark.case("BI-39")
    @pytest.mark.parametrize("args", [["state", "a", "b"], ["kill", "a", "TERM", "x"],
                                      ["delete", "a", "b"], ["start", "a", "b"],
                                      ["create", "--bundle", ".", "a", "b"]])
    def test_extra_arguments(self, env: Env, args: list[str]) -> None:
        """Extra arguments are a usage error (exit 2)."""
        assert_failed(env, run_in_work(env, *args), "Got unexpected extra argument", rc=2)

    @pytest.mark.case("BI-40")
    @pytest.mark.parametrize(("args", "needle"), [
        (["frobnicate", "a"], "No such command 'frobnicate'"),
        (["--bogus", "state", "a"], "No such option '--bogus'"),
        (["--log-format", "xml", "state", "a"], "Invalid value for '--log-format'"),
    ])
    def test_bad_usage(self, env: Env, args: list[str], needle: str) -> None:
        """Unknown verb, unknown global option, bad --log-format: exit 2."""
        # --log-format given twice: the last one (xml) is what click sees
        assert_failed(env, run_in_work(env, *args), needle, rc=2)

    @pytest.mark.case("BI-40")
    def test_no_verb_prints_the_help(self, env: Env) -> None:
        """No verb at all: the help on stdout and exit 0, as runc does."""
        res = run_in_work(env)
        assert (0, "") == (res.returncode, res.stderr)
        assert "--log-format [text|json]" in res.stdout

    @pytest.mark.case("BI-41")
    @pytest.mark.parametrize("verb", ["pause", "resume", "update", "checkpoint"])
    def test_unsupported_verb(self, env: Env, verb: str) -> None:
        """runc verbs scrun-py does not implement say so."""
        assert_failed(env, run_in_work(env, verb, "a"), f"{verb} is not supported by scrun-py")


class TestWrongState:
    @pytest.mark.case("BI-42")
    def test_start_twice(self, env: Env) -> None:
        """start of a running container, then of a stopped one: refused, unaffected."""
        bundle = env.bundle(["sh", "-c", "echo started; read x; exit 4"])
        r, w = os.pipe()
        created = env.create("st", bundle, stdin=r)
        os.close(r)
        assert 0 == created.rc, created.stderr()
        assert 0 == env.run("start", "st").returncode
        deadline = time.monotonic() + 60
        while "started" not in created.stdout():
            assert time.monotonic() < deadline, created.stderr()
            time.sleep(0.1)
        res = run_in_work(env, "start", "st")
        assert 0 != res.returncode
        assert "cannot start an already running container" in res.stderr
        assert "running" == env.state("st")["status"]
        os.write(w, b"go\n")
        os.close(w)
        assert 4 == created.wait_exit()
        res = run_in_work(env, "start", "st")
        assert 0 != res.returncode
        assert "cannot start a container that has stopped" in res.stderr
        assert "started\n" == created.stdout()
        assert 0 == env.run("delete", "st").returncode
        assert [] == traces(env, "st")

    @pytest.mark.case("BI-43")
    def test_kill_stopped(self, env: Env) -> None:
        """kill of a stopped container: runc's `container not running`."""
        created = env.create("ks", env.bundle(["true"]))
        assert 0 == created.rc, created.stderr()
        assert 0 == env.run("start", "ks").returncode
        assert 0 == created.wait_exit()
        res = run_in_work(env, "kill", "ks", "TERM")
        assert 0 != res.returncode
        assert "container not running" == res.stderr.strip().split(": ", 1)[1]
        assert "container not running" == env.errors()[-1]["msg"]
        assert 0 == env.run("delete", "ks").returncode
        assert [] == traces(env, "ks")
