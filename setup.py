"""The build's one addition to pyproject.toml: the commit the sdist or the wheel is built
from, written into the package as scrun_py/_commit.txt, which `scrun-py --version`
prints where there is no .git (scrun_py/base/version.py).

Built from a git checkout, the commit is HEAD's; built from an sdist (`python -m build`
builds the wheel from the sdist it has just made), it is the one the sdist carries.  The
file is written into the build's own trees only, never into the source tree."""

from __future__ import annotations

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
COMMIT_FILE = os.path.join("scrun_py", "_commit.txt")


def build_commit() -> str:
    """HEAD's commit in a git checkout, else the sdist's scrun_py/_commit.txt, else
    'unknown': scrun_py.base.version.git_commit of this source tree."""
    sys.path.insert(0, HERE)
    try:
        from scrun_py.base.version import git_commit
    finally:
        sys.path.remove(HERE)
    return git_commit(HERE)


def write_commit(tree: str) -> None:
    """scrun_py/_commit.txt in `tree` (a build tree), when the commit is known."""
    commit = build_commit()
    if commit == "unknown":
        return
    path = os.path.join(tree, COMMIT_FILE)
    # sdist's release tree hard-links the source files: a new file, never the source's
    if os.path.lexists(path):
        os.unlink(path)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(commit + "\n")


class BuildPy(build_py):
    """The package's modules, and the commit beside them (not for an editable install,
    which reads the checkout's .git)."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            write_commit(self.build_lib)


class Sdist(sdist):
    """The source release, with the commit it is made from."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        write_commit(base_dir)


if __name__ == "__main__":
    setup(cmdclass={"build_py": BuildPy, "sdist": Sdist})
