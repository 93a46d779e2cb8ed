"""oci/command.py: process.args[0] looked up inside the rootfs as runc looks it up inside
the container, with runc's words for a command that cannot run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scrun_py.oci.command import command_problem, mount_destinations, resolve

NOT_FOUND = 'exec: "{0}": stat {0}: no such file or directory'
NOT_ON_PATH = 'exec: "{0}": executable file not found in $PATH'
DENIED = 'exec: "{0}": permission denied'


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    """A busybox-like rootfs: /bin/busybox, absolute links to it, a directory /etc, a
    file without execute bits, a relative link and a link that leaves the rootfs."""
    root = tmp_path / "rootfs"
    for d in ("bin", "usr/bin", "etc", "opt/app"):
        (root / d).mkdir(parents=True)
    (root / "bin" / "busybox").touch(mode=0o755)
    (root / "bin" / "sh").symlink_to("/bin/busybox")
    (root / "usr" / "bin" / "env").symlink_to("../../bin/busybox")
    (root / "etc" / "passwd").touch(mode=0o644)
    (root / "opt" / "app" / "run").touch(mode=0o700)
    (root / "bin" / "escape").symlink_to("/../../../../bin/true")  # host's, not ours
    (root / "bin" / "loop").symlink_to("/bin/loop")
    return root


class TestCommandProblem:
    @pytest.mark.parametrize("args", [["/bin/busybox"], ["/bin/sh", "-c", "x"], ["sh"],
                                      ["env"], ["/usr/bin/env"], ["app/run"],
                                      ["/opt/app/../app/run"]])
    def test_runnable(self, rootfs: Path, args: list[str]) -> None:
        """An executable reached by path, by PATH, through absolute or relative links
        inside the rootfs, or relative to process.cwd, is accepted."""
        assert "" == command_problem(args, ["PATH=/usr/bin:/bin"], "/opt", str(rootfs))

    def test_missing_path(self, rootfs: Path) -> None:
        """A path that is not there: runc's stat error (podman and docker: 127)."""
        assert NOT_FOUND.format("/no/such/command") == command_problem(
            ["/no/such/command"], [], "/", str(rootfs))

    def test_missing_name(self, rootfs: Path) -> None:
        """A name on no PATH directory: runc's LookPath error (127)."""
        assert NOT_ON_PATH.format("nosuch") == command_problem(
            ["nosuch"], ["PATH=/bin:/usr/bin"], "/", str(rootfs))

    @pytest.mark.parametrize("name", ["/etc", "/etc/passwd", "/bin/"])
    def test_not_executable(self, rootfs: Path, name: str) -> None:
        """A directory or a file without execute bits: permission denied (126)."""
        assert DENIED.format(name) == command_problem([name], [], "/", str(rootfs))

    def test_name_found_only_as_non_executable(self, rootfs: Path) -> None:
        """A PATH entry holding the name without execute bits is skipped, as Go does."""
        assert NOT_ON_PATH.format("passwd") == command_problem(
            ["passwd"], ["PATH=/etc"], "/", str(rootfs))

    def test_default_path(self, rootfs: Path) -> None:
        """Without PATH in process.env, runc's default PATH is searched."""
        assert "" == command_problem(["busybox"], ["HOME=/"], "/", str(rootfs))

    def test_link_never_reaches_the_host(self, rootfs: Path) -> None:
        """An absolute link is resolved from the rootfs's top, `..` never above it: the
        host's /bin/true does not count."""
        assert os.path.exists("/bin/true")
        assert NOT_FOUND.format("/bin/escape") == command_problem(
            ["/bin/escape"], [], "/", str(rootfs))

    def test_link_loop_is_left_to_the_node(self, rootfs: Path) -> None:
        """A lookup that cannot be finished here refuses nothing."""
        assert "" == command_problem(["/bin/loop"], [], "/", str(rootfs))

    @pytest.mark.parametrize("name", ["/sbin/docker-init", "/run/podman-init/x", "tool"])
    def test_mounted_path_is_left_to_the_node(self, rootfs: Path, name: str) -> None:
        """A path a config.json mount covers is not in the rootfs: not judged here."""
        mounts = ["/sbin/docker-init", "/run/podman-init", "/host/tools"]
        assert "" == command_problem([name], ["PATH=/host/tools"], "/", str(rootfs), mounts)

    def test_empty_args(self, rootfs: Path) -> None:
        assert "" == command_problem([], [], "/", str(rootfs))


class TestResolve:
    def test_file_under_a_file(self, rootfs: Path) -> None:
        """A path through a regular file does not exist (ENOTDIR)."""
        assert resolve(str(rootfs), "/etc/passwd/x") is None

    def test_root(self, rootfs: Path) -> None:
        st = resolve(str(rootfs), "/")
        assert st is not None and os.stat(rootfs).st_ino == st.st_ino


class TestMountDestinations:
    def test_strings_only(self) -> None:
        raw = {"mounts": [{"destination": "/proc"}, {"destination": 3}, "x", {}]}
        assert ["/proc"] == mount_destinations(raw)

    @pytest.mark.parametrize("raw", [{}, {"mounts": None}, [], "x"])
    def test_none(self, raw: object) -> None:
        assert [] == mount_destinations(raw)
