"""A container's volumes under docker and podman (root and rootless), on the test cluster,
with the shipped staging script as scrun.lua and the engines' scrun-py.toml naming /home
as a shared path (scripts/engines.sh): a volume from under /home is the user's own
directory in the container, nothing copied; any other volume is copied in, without what
the user cannot own or read, and its changes come back when the container ends."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import test_engines as engines
from tests.e2e.conftest import TEST_USER, User
from tests.e2e.test_staging_cache import guarded

pytestmark = [pytest.mark.e2e, pytest.mark.engines]

engines_up = engines.engines_up


@pytest.fixture(params=["docker", "podman-root", "podman-rootless"])
def engine(request: pytest.FixtureRequest, engines_up: None) -> Iterator[engines.Engine]:
    name, _, who = str(request.param).partition("-")
    yield from guarded(
        engines.Engine(name, User.named(TEST_USER if who == "rootless" else "root")))


def owned_dir(parent: str, user: User) -> Path:
    path = Path(tempfile.mkdtemp(prefix="scrun-vol-", dir=parent))
    os.chown(path, user.uid, user.gid)
    return path


@pytest.fixture
def home_dir(engine: engines.Engine) -> Iterator[Path]:
    """A directory of the engine's user under /home (a shared path)."""
    path = owned_dir(User.named(TEST_USER).home, engine.user)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def local_dir(engine: engines.Engine) -> Iterator[Path]:
    """A directory of the engine's user on this machine's own disk (not shared)."""
    path = owned_dir("/var/tmp", engine.user)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_home_volume_is_written_through(engine: engines.Engine, home_dir: Path) -> None:
    """`-v DIR:/work` with DIR under /home: the container reads the user's files and what
    it writes is in DIR, owned by the user, when `run` returns."""
    (home_dir / "in.txt").write_text("input\n")
    os.chown(home_dir / "in.txt", engine.user.uid, engine.user.gid)
    res = engine.run("--rm", "-v", f"{home_dir}:/work", engine.image, "sh", "-c",
                     "cat /work/in.txt; echo result > /work/out.txt")
    out = home_dir / "out.txt"
    assert (0, "input\n", "result\n", engine.user.uid) == (
        res.returncode, res.stdout, out.read_text() if out.exists() else "",
        out.stat().st_uid if out.exists() else -1), res.stderr


def test_a_read_only_home_volume_stays_read_only(engine: engines.Engine,
                                                 home_dir: Path) -> None:
    res = engine.run("--rm", "-v", f"{home_dir}:/work:ro", engine.image, "sh", "-c",
                     "echo x > /work/new && echo wrote || echo refused")
    assert (0, "refused", False) == (res.returncode, res.stdout.strip().splitlines()[-1],
                                     (home_dir / "new").exists()), res.stderr


def test_a_copied_volume_comes_back(engine: engines.Engine, local_dir: Path) -> None:
    """A volume outside the shared paths is copied in: the container's new and changed
    files are in the source after `run` returns."""
    (local_dir / "keep").write_text("before\n")
    os.chown(local_dir / "keep", engine.user.uid, engine.user.gid)
    res = engine.run("--rm", "-v", f"{local_dir}:/work", engine.image, "sh", "-c",
                     "cat /work/keep; echo after > /work/keep; echo new > /work/new")
    assert (0, "before\n", "after\n", "new\n") == (
        res.returncode, res.stdout, (local_dir / "keep").read_text(),
        (local_dir / "new").read_text() if (local_dir / "new").exists() else ""), res.stderr


@pytest.mark.parametrize("engine", ["podman-rootless"], indirect=True)
def test_what_the_user_cannot_own_or_read_does_not_fail_the_run(
        engine: engines.Engine, local_dir: Path) -> None:
    """A volume with a file of group root and a directory only root can read: the run
    succeeds, the readable file is there, the unreadable directory is not, and the
    container's write comes back."""
    (local_dir / "rootgroup").write_text("shared\n")
    os.chown(local_dir / "rootgroup", engine.user.uid, 0)
    secret = local_dir / "private"
    secret.mkdir(mode=0o700)
    (secret / "key").write_text("secret\n")
    res = engine.run("--rm", "-v", f"{local_dir}:/work", engine.image, "sh", "-c",
                     "cat /work/rootgroup; ls /work; echo out > /work/out")
    assert (0, ["shared", "rootgroup"], "out\n") == (
        res.returncode, res.stdout.split(),
        (local_dir / "out").read_text() if (local_dir / "out").exists() else ""), res.stderr


@pytest.mark.parametrize("engine", ["podman-rootless"], indirect=True)
def test_a_system_directory_with_unreadable_entries(engine: engines.Engine) -> None:
    """`-v /etc/ssl:/ssl:ro` as an ordinary user (/etc/ssl/private is root's alone): the
    run succeeds and sees the readable part."""
    res = engine.run("--rm", "-v", "/etc/ssl:/ssl:ro", engine.image, "sh", "-c",
                     "ls /ssl; test -e /ssl/private && echo private || echo no-private")
    assert 0 == res.returncode, res.stderr
    assert "certs" in res.stdout.split()
    assert "no-private" == res.stdout.split()[-1], res.stdout
