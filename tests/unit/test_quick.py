"""The os+json paths (scrun_py/quick.py): `state` prints what the full path prints,
`start` sends the protocol's request and fails as the full path fails, `delete` of a
stopped container removes what the full path removes, and every other case (errors
included) is left to the full path untouched."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from scrun_py import procs, protocol, quick, spool
from scrun_py.errors import ScrunError
from scrun_py.quick import answer
from tests.unit.cli_run import run, stored


def _full(root: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    capsys.readouterr()
    assert 0 == run([*extra, "--root", str(root), "state", "c1"])
    return capsys.readouterr().out.strip()


ME = os.getpid()


@pytest.mark.parametrize(("status", "pid", "fields"), [
    ("created", ME, {"anchor_start": procs.process_start_time(ME)}),
    ("running", ME, {"annotations": {"a": "b"}}),
    ("running", ME, {"anchor_start": "1"}),  # the pid was reused: stopped
    ("creating", 0, {}), ("stopped", 0, {"exit_code": 3}),
    ("running", 2 ** 22 + 1, {}),  # no such process: stopped
])
def test_same_document_as_the_full_path(tmp_root: Path, capsys: pytest.CaptureFixture[str],
                                        status: str, pid: int,
                                        fields: dict[str, object]) -> None:
    """Every status, live and dead anchors: the line the full path prints."""
    stored(tmp_root, status, pid, **fields)
    line = answer(["--root", str(tmp_root), "state", "c1"], {})
    assert line is not None
    assert _full(tmp_root, capsys) == line
    assert _full(tmp_root, capsys, "--log-format", "json") == answer(
        ["--log-format=json", "--root", str(tmp_root), "state", "c1"], {})


@pytest.mark.parametrize("argv", [
    ["state", "c1"], ["--root", "R", "state"], ["--root", "R", "--root", "R", "state", "c1"],
    ["--debug", "--root", "R", "state", "c1"], ["--root", "R", "state", "c/1"],
    ["--root", "R", "state", ".."], ["--root", "R", "--log-format", "xml", "state", "c1"],
    ["--root", "R", "--log", "syslog:x", "state", "c1"], ["--root", "R", "state", "c2"],
    ["--root", "R", "-f=x", "state", "c1"], ["--root", "R", "kill", "c1"],
    ["-f", "x", "--slurm-conf", "y", "--root", "R", "state", "c1"],
])
def test_other_shapes_go_the_full_way(tmp_root: Path, argv: list[str]) -> None:
    """No --root, other options, odd ids, a missing record: None."""
    stored(tmp_root, "running", ME)
    assert None is answer([str(tmp_root) if a == "R" else a for a in argv], {})


def test_diagnostics_settings_go_the_full_way(tmp_root: Path) -> None:
    """SCRUN_*DEBUG may be invalid or log something: the full path decides."""
    stored(tmp_root, "running", ME)
    assert None is answer(["--root", str(tmp_root), "state", "c1"], {"SCRUN_DEBUG": "x"})


@pytest.mark.parametrize("content", [
    b"{", b"[]", b'{"id": "c1"}', b'{"id": "c1", "bundle": "/b", "rootfs": "/r", '
    b'"status": "weird"}', b'{"id": "c1", "bundle": "/b", "rootfs": "/r", '
    b'"status": "running", "anchor_pid": "12"}',
])
def test_odd_records_go_the_full_way(tmp_root: Path, content: bytes) -> None:
    """A record the full path would call corrupt (or read with other types): None."""
    cdir = spool.make_container_dir(tmp_root, "c1")
    (cdir / spool.STATE_FILE).write_bytes(content)
    assert None is answer(["--root", str(tmp_root), "state", "c1"], {})


def test_keeps_unknown_record_fields_out(tmp_root: Path) -> None:
    """Fields of the record that are not in the OCI document stay out of it."""
    stored(tmp_root, "running", ME, job_id=5)
    line = answer(["--root", str(tmp_root), "state", "c1"], {})
    assert line is not None
    assert "job_id" not in json.loads(line)


def test_file_names_are_the_full_paths() -> None:
    """What a stopped anchor leaves: the names spool and the holder script use."""
    from scrun_py.slurm.argv import ABANDON_FILE

    assert (spool.STATE_FILE, ABANDON_FILE, spool.SOCKET_NAME) == (
        quick.STATE_FILE, quick.ABANDON_FILE, quick.SOCKET_NAME)


def test_system_site_file_is_site_conf_s() -> None:
    """The quick path steps aside for the same system file site_conf reads."""
    from scrun_py import site_conf

    assert str(site_conf.system_file()) == quick.SYSTEM_SITE_FILE


def _delete_argv(root: Path, *extra: str) -> list[str]:
    return ["--root", str(root), "-f", str(root.parent / "slurm.conf"), "delete", *extra, "c1"]


@pytest.mark.parametrize("abandon", [False, True])
@pytest.mark.parametrize("force", [False, True])
def test_delete_of_a_stopped_container(tmp_root: Path, abandon: bool, force: bool) -> None:
    """The record (and the holder's script) removed, as the full path removes them."""
    cdir = stored(tmp_root, "stopped", 0, exit_code=0)
    if abandon:
        (cdir / quick.ABANDON_FILE).write_text("true\n")
    assert quick.delete(_delete_argv(tmp_root, *(["--force"] if force else [])), {})
    assert not cdir.exists()


def test_delete_force_of_a_container_that_is_gone(tmp_root: Path) -> None:
    """docker's second delete (--force): nothing to do, success; without --force the
    full path reports `container does not exist`."""
    assert quick.delete(_delete_argv(tmp_root, "-f"), {})
    assert not quick.delete(_delete_argv(tmp_root), {})


@pytest.mark.parametrize(("status", "pid", "extra"), [
    ("running", ME, ""), ("created", ME, ""), ("stopped", ME, ""),  # anchor pid kept
    ("stopped", 0, "anchor.sock"), ("stopped", 0, "stage-dir"),  # more than the record
])
def test_anything_else_is_left_to_the_full_path(tmp_root: Path, status: str, pid: int,
                                                extra: str) -> None:
    """A live or unusual container: False, and nothing was touched."""
    cdir = stored(tmp_root, status, pid)
    if extra:
        (cdir / extra).write_text("")
    before = sorted(p.name for p in cdir.iterdir())
    assert not quick.delete(_delete_argv(tmp_root, "--force"), {})
    assert before == sorted(p.name for p in cdir.iterdir())


def test_a_site_file_is_left_to_the_full_path(tmp_root: Path) -> None:
    """scrun-py.toml may ask for an audit record of the delete."""
    cdir = stored(tmp_root, "stopped", 0)
    (tmp_root.parent / "scrun-py.toml").write_text("[audit]\n")
    assert not quick.delete(_delete_argv(tmp_root), {})
    assert cdir.exists()
    assert not quick.delete(["--root", str(tmp_root), "delete", "c1"],
                            {"SLURM_CONF": str(tmp_root.parent / "slurm.conf")})


def test_a_system_site_file_is_left_to_the_full_path(tmp_root: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The system's scrun-py.toml may make itself the file in use (and ask for an audit
    record) whatever slurm.conf -f names; without it the same delete is quick."""
    cdir = stored(tmp_root, "stopped", 0)
    system = tmp_path / "system" / "scrun-py.toml"
    system.parent.mkdir()
    system.write_text('[trust]\nsite_files = "system"\n[audit]\n')
    monkeypatch.setattr(quick, "SYSTEM_SITE_FILE", str(system))
    assert not quick.delete(_delete_argv(tmp_root), {})
    assert cdir.exists()
    system.unlink()
    assert quick.delete(_delete_argv(tmp_root), {})
    assert not cdir.exists()


def test_the_full_path_agrees(tmp_root: Path) -> None:
    """The full path deletes the same stopped container the same way."""
    cdir = stored(tmp_root, "stopped", 0)
    (cdir / quick.ABANDON_FILE).write_text("true\n")
    assert 0 == run(_delete_argv(tmp_root))
    assert not cdir.exists()
    assert 0 == run(_delete_argv(tmp_root, "--force"))


def _anchor(cdir: Path, reply: bytes | None) -> tuple[threading.Thread, list[bytes]]:
    """A one-request anchor on the control socket: answers `reply` (None: hangs up)."""
    listener = spool.bind(cdir)
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, listener:
            got.append(conn.recv(65536))
            if reply is not None:
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread, got


def _start_argv(root: Path) -> list[str]:
    return ["--root", str(root), "-f", str(root.parent / "slurm.conf"), "start", "c1"]


def test_start_sends_the_protocols_request(tmp_root: Path) -> None:
    """The request is protocol.encode_request("start"); an ok reply is success."""
    cdir = stored(tmp_root, "created", ME, anchor_start=procs.process_start_time(ME))
    thread, got = _anchor(cdir, protocol.encode_ok(job_id=5))
    assert quick.start(_start_argv(tmp_root), {})
    thread.join(5)
    assert [protocol.encode_request("start")] == got


@pytest.mark.parametrize(("reply", "message"), [
    (protocol.encode_error(ScrunError("cannot start a container that is still being "
                                      "created")),
     "cannot start a container that is still being created"),
    (None, "cannot start a container that has stopped"),
    (b"nonsense\n", "malformed control message"),
])
def test_start_failures_raise_what_the_full_path_raises(tmp_root: Path, reply: bytes | None,
                                                        message: str) -> None:
    """An error reply, a hang-up, garbage: the full path's errors (commands/start)."""
    cdir = stored(tmp_root, "created", ME)
    _anchor(cdir, reply)
    with pytest.raises(ScrunError) as info:
        quick.start(_start_argv(tmp_root), {})
    assert message == str(info.value)


@pytest.mark.parametrize(("status", "pid"), [
    ("running", ME), ("stopped", 0), ("created", 2 ** 22 + 1), ("creating", ME)])
def test_start_leaves_other_containers_to_the_full_path(tmp_root: Path, status: str,
                                                        pid: int) -> None:
    """Not a created container with a live anchor: False (the full path says why)."""
    stored(tmp_root, status, pid)
    assert not quick.start(_start_argv(tmp_root), {})


def test_start_without_a_socket_is_left_to_the_full_path(tmp_root: Path) -> None:
    """Nothing was sent: the full path connects again and words the failure."""
    stored(tmp_root, "created", ME)
    assert not quick.start(_start_argv(tmp_root), {})
    (tmp_root.parent / "scrun-py.toml").write_text("")
    assert not quick.start(_start_argv(tmp_root), {})
