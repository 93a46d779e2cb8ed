"""The release `srun --version` printed, remembered per srun binary in the caller's
--root (slurm/release_memo.py): the anchor asks srun once per binary, not once per
container, and never takes an answer it did not write for that binary."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from scrun_py.base.errors import InvalidContainerId
from scrun_py.base.records import NamedTuple
from scrun_py.container.record import validate_id
from scrun_py.slurm import release_memo
from scrun_py.slurm.choice import CliOptions
from scrun_py.slurm.cli_backend import CliSlurm

SRUN = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "version" >> "$ASKED"; echo "slurm $VERSION"; exit 0; fi
exit 0
"""


class Srun(NamedTuple):
    path: Path
    asked: Path
    root: Path


@pytest.fixture
def srun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Srun:
    path = tmp_path / "bin" / "srun"
    path.parent.mkdir()
    path.write_text(SRUN)
    path.chmod(0o755)
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    monkeypatch.setenv("ASKED", str(tmp_path / "asked"))
    monkeypatch.setenv("VERSION", "24.11.1")
    return Srun(path, tmp_path / "asked", root)


def release_of(srun: Srun) -> tuple[int, int]:
    return CliSlurm(srun_path=str(srun.path), memo_dir=str(srun.root))._slurm_version()


def times_asked(srun: Srun) -> int:
    return len(srun.asked.read_text().splitlines()) if srun.asked.exists() else 0


def test_srun_is_asked_once_per_binary(srun: Srun) -> None:
    assert (24, 11) == release_of(srun)
    assert (24, 11) == release_of(srun)
    assert (24, 11) == release_of(srun)
    assert 1 == times_asked(srun)
    assert [release_memo.MEMO_NAME] == os.listdir(srun.root)


def test_a_new_binary_is_asked_again(srun: Srun, monkeypatch: pytest.MonkeyPatch) -> None:
    assert (24, 11) == release_of(srun)
    # an upgrade: the binary is replaced (new inode, mtime)
    monkeypatch.setenv("VERSION", "25.11.0")
    new = srun.path.with_name("srun.new")
    new.write_text(SRUN + "\n")
    new.chmod(0o755)
    new.rename(srun.path)
    assert (25, 11) == release_of(srun)
    assert 2 == times_asked(srun)


def test_without_a_memo_dir_srun_is_asked_every_time(srun: Srun) -> None:
    for _ in range(2):
        assert (24, 11) == CliSlurm(srun_path=str(srun.path))._slurm_version()
    assert 2 == times_asked(srun)
    assert [] == os.listdir(srun.root)


def test_a_failed_answer_is_not_remembered(srun: Srun, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    monkeypatch.setenv("VERSION", "garbage")
    release_of(srun)
    assert [] == os.listdir(srun.root)


@pytest.mark.parametrize("text", [
    "{key}\t99.1\nmore\n",  # not one line: not the key's
    "other\t99.1\n",         # another binary's
    "{key}\t99\n",           # not major.minor
    "{key}\tx.y\n",
    "{key}99.1\n",           # no separator
])
def test_a_memo_that_is_not_the_binarys_is_not_taken(srun: Srun, text: str) -> None:
    key = release_memo.binary_key(str(srun.path))
    assert key is not None
    (srun.root / release_memo.MEMO_NAME).write_text(text.format(key=key))
    assert (24, 11) == release_of(srun)
    assert 1 == times_asked(srun)


def test_a_planted_symlink_or_fifo_is_not_read(srun: Srun, tmp_path: Path) -> None:
    key = release_memo.binary_key(str(srun.path))
    planted = tmp_path / "planted"
    planted.write_text(f"{key}\t99.1\n")
    memo = srun.root / release_memo.MEMO_NAME
    memo.symlink_to(planted)
    assert release_memo.recall(str(memo), str(key)) is None
    memo.unlink()
    os.mkfifo(memo)
    assert release_memo.recall(str(memo), str(key)) is None  # and does not block


def test_an_oversized_memo_is_not_read(srun: Srun) -> None:
    key = str(release_memo.binary_key(str(srun.path)))
    memo = srun.root / release_memo.MEMO_NAME
    memo.write_text(f"{key}\t99.1\n" + "x" * 5000)
    assert release_memo.recall(str(memo), key) is None


def test_a_memo_that_cannot_be_written_only_costs_the_question(srun: Srun) -> None:
    gone = srun.root / "gone"  # a --root removed under the anchor
    for _ in range(2):
        assert (24, 11) == CliSlurm(srun_path=str(srun.path),
                                    memo_dir=str(gone))._slurm_version()
    assert 2 == times_asked(srun)
    assert not gone.exists()


def test_the_memo_name_is_no_container_id() -> None:
    with pytest.raises(InvalidContainerId):
        validate_id(release_memo.MEMO_NAME)


def test_the_backend_choice_asks_through_the_memo_too(srun: Srun) -> None:
    """`auto` with pyslurm installed compares pyslurm's release with srun's
    (slurm/choice.py Decision): that question goes through the memo as well."""
    options = CliOptions(srun_path=str(srun.path), memo_dir=str(srun.root))
    assert (24, 11) == options.client_release()
    assert (24, 11) == release_of(srun)
    assert (24, 11) == options.client_release()
    assert 1 == times_asked(srun)


def test_a_writer_killed_mid_write_leaves_nothing(tmp_path: Path) -> None:
    """A process killed while it writes the memo (create killed, an allocation that fails
    and ends the anchor) leaves no file in the --root: the memo has no name until it is
    complete."""
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    path = release_memo.memo_path(str(root))
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the writer: stops inside its write, as a process killed there would
        os.close(ready_r)
        real_write = os.write

        def stuck_write(fd: int, data: bytes) -> int:
            real_write(ready_w, b"x")
            os.kill(os.getpid(), signal.SIGSTOP)
            return real_write(fd, data)

        os.write = stuck_write  # type: ignore[assignment]
        release_memo.remember(path, "key", (24, 11))
        os._exit(0)
    os.close(ready_w)
    try:
        assert b"x" == os.read(ready_r, 1)
        assert [] == os.listdir(root)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(ready_r)
    assert [] == os.listdir(root)


def test_a_memo_for_another_binary_is_replaced(srun: Srun) -> None:
    path = release_memo.memo_path(str(srun.root))
    release_memo.remember(path, "old-binary", (22, 5))
    release_memo.remember(path, "new-binary", (24, 11))
    assert (24, 11) == release_memo.recall(path, "new-binary")
    assert None is release_memo.recall(path, "old-binary")
    assert [release_memo.MEMO_NAME] == os.listdir(srun.root)
