"""The package sites install: the commit the build writes into it (setup.py, read by
base/version.py where there is no .git), the example site files it carries, its
dependencies' bounds, and the scrun-py the tests run being this checkout's.

The end-to-end tests run the virtualenv's command ($SCRUN_TEST_VENV/bin/scrun-py, the wheel
under CI=true: scripts/cluster.sh), which imports the installed package; the tests that
import scrun_py in-process import the checkout (pytest puts it first on sys.path).
TestInstalled holds the two to the same files and the same commit."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from scrun_py.base import version

REPO = Path(__file__).resolve().parents[2]
SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"
#: the virtualenv whose scrun-py the tests run (the interpreter's own by default)
VENV = Path(os.environ.get("SCRUN_TEST_VENV") or sys.prefix)


def _commit_file(top: Path, text: str) -> Path:
    path = top / "scrun_py" / version.BUILD_COMMIT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


class TestBuildCommit:
    """git_commit where the package was built: scrun_py/_commit.txt."""

    def test_installed_wheel(self, tmp_path: Path) -> None:
        """site-packages: no pyproject.toml beside the package, the build's file in it."""
        _commit_file(tmp_path, SHA + "\n")
        assert SHA == version.git_commit(str(tmp_path))

    def test_unpacked_sdist(self, tmp_path: Path) -> None:
        """An sdist's tree: pyproject.toml but no .git."""
        (tmp_path / "pyproject.toml").write_text("")
        _commit_file(tmp_path, SHA + "\n")
        assert SHA == version.git_commit(str(tmp_path))

    @pytest.mark.parametrize("git_head", [OTHER, "garbage"])
    def test_a_checkout_answers_from_git(self, tmp_path: Path, git_head: str) -> None:
        """In a checkout .git answers, even when it says nothing: a file a build left
        there names an older commit."""
        (tmp_path / "pyproject.toml").write_text("")
        (tmp_path / ".git").mkdir()
        (tmp_path / ".git" / "HEAD").write_text(git_head + "\n")
        _commit_file(tmp_path, SHA + "\n")
        assert (OTHER if git_head == OTHER else "unknown") == version.git_commit(str(tmp_path))

    @pytest.mark.parametrize("text", ["", "\n", "garbage\n", SHA[:12] + "\n", SHA.upper()])
    def test_not_a_commit(self, tmp_path: Path, text: str) -> None:
        _commit_file(tmp_path, text)
        assert "unknown" == version.git_commit(str(tmp_path))

    def test_undecodable(self, tmp_path: Path) -> None:
        path = _commit_file(tmp_path, "")
        path.write_bytes(b"\xff\xfe" + SHA.encode())
        assert "unknown" == version.git_commit(str(tmp_path))

    def test_no_file(self, tmp_path: Path) -> None:
        """A wheel built where the commit was unknown carries no file."""
        assert "unknown" == version.git_commit(str(tmp_path))


def _setup_py() -> ModuleType:
    """setup.py as a module (setup() runs only as __main__, as the build backend runs it)."""
    spec = importlib.util.spec_from_file_location("scrun_py_setup", REPO / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TestSetupHook:
    """setup.py writes the commit into the build's trees (the wheel's build_lib, the
    sdist's release tree)."""

    def test_the_commit_is_this_source_tree(self) -> None:
        setup_py = _setup_py()
        path = list(sys.path)
        assert version.git_commit(str(REPO)) == setup_py.build_commit()
        assert path == sys.path

    def test_written_into_the_tree(self, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
        setup_py = _setup_py()
        monkeypatch.setattr(setup_py, "build_commit", lambda: SHA)
        (tmp_path / "scrun_py").mkdir()
        setup_py.write_commit(str(tmp_path))
        assert SHA == version.git_commit(str(tmp_path))

    def test_never_through_a_hard_link(self, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
        """sdist's release tree hard-links the source files: the source's own file, if
        there is one, keeps what it says."""
        setup_py = _setup_py()
        monkeypatch.setattr(setup_py, "build_commit", lambda: SHA)
        source = _commit_file(tmp_path / "src", OTHER + "\n")
        tree = tmp_path / "tree"
        (tree / "scrun_py").mkdir(parents=True)
        os.link(source, tree / "scrun_py" / version.BUILD_COMMIT_FILE)
        setup_py.write_commit(str(tree))
        assert OTHER + "\n" == source.read_text()
        assert SHA == version.git_commit(str(tree))

    def test_nothing_for_an_unknown_commit(self, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
        setup_py = _setup_py()
        monkeypatch.setattr(setup_py, "build_commit", lambda: "unknown")
        (tmp_path / "scrun_py").mkdir()
        setup_py.write_commit(str(tmp_path))
        assert [] == list((tmp_path / "scrun_py").iterdir())


def _installed() -> Path:
    """The directory of the scrun_py that the virtualenv's python imports outside the
    checkout (from /, without PYTHONPATH)."""
    python = VENV / "bin" / "python"
    if not (VENV / "bin" / "scrun-py").is_file():
        pytest.skip(f"no scrun-py installed in {VENV}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([str(python), "-P", "-c", "import scrun_py; print(scrun_py.__file__)"],
                         capture_output=True, text=True, cwd="/", env=env, timeout=60,
                         check=False)
    assert 0 == res.returncode, res.stderr
    return Path(res.stdout.strip()).resolve().parent


def _modules(package: Path) -> dict[str, bytes]:
    return {str(p.relative_to(package)): p.read_bytes() for p in sorted(package.rglob("*.py"))
            if "__pycache__" not in p.parts}


class TestInstalled:
    """The scrun-py of $SCRUN_TEST_VENV (what the end-to-end tests run) is this checkout:
    an editable install of it, or a wheel (or copy) built from it as it is."""

    REINSTALL = "the virtualenv holds another scrun-py than the checkout: scripts/cluster.sh up"

    def test_the_installed_modules_are_the_checkouts(self) -> None:
        installed = _installed()
        if installed == REPO / "scrun_py":
            return  # editable: the checkout itself
        ours, theirs = _modules(REPO / "scrun_py"), _modules(installed)
        assert sorted(ours) == sorted(theirs), self.REINSTALL
        assert [] == [name for name in ours if ours[name] != theirs[name]], self.REINSTALL

    def test_the_installed_command_is_bin_scrun_py(self) -> None:
        """bin/scrun-py as the command (script-files), its first line naming the
        virtualenv's python."""
        _installed()
        command = (VENV / "bin" / "scrun-py").read_text().splitlines()
        script = (REPO / "bin" / "scrun-py").read_text().splitlines()
        interpreter = Path(command[0].removeprefix("#!").strip())
        assert (VENV / "bin").resolve() == interpreter.parent.resolve(), command[0]
        assert os.access(VENV / "bin" / "scrun-py", os.X_OK)
        assert script[1:] == command[1:], self.REINSTALL

    def test_the_installed_version_names_the_checkouts_commit(self) -> None:
        """--version's commit line, run as the engines run it (outside the checkout): the
        checkout's .git for an editable install, the build's file for a wheel."""
        _installed()
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        res = subprocess.run([str(VENV / "bin" / "scrun-py"), "--version"], cwd="/", env=env,
                             capture_output=True, text=True, timeout=60, check=False)
        assert 0 == res.returncode, res.stderr
        assert f"commit: {version.git_commit(str(REPO))}" == res.stdout.splitlines()[1], \
            self.REINSTALL

    def test_the_installed_examples_are_the_checkouts(self) -> None:
        """`scrun-py example` of the installed package prints the checkout's files: the
        wheel (or the editable install) carries scrun_py/examples/."""
        installed = _installed()
        ours = REPO / "scrun_py" / "examples"
        names = sorted(p.name for p in ours.iterdir())
        assert names == sorted(p.name for p in (installed / "examples").iterdir()), \
            self.REINSTALL
        for name in names:
            assert (ours / name).read_bytes() == (installed / "examples" / name).read_bytes(), \
                self.REINSTALL


#: scrun_py/examples/ entry -> the source tree's file it links to
EXAMPLE_LINKS = {"oci.conf.example": "../../oci.conf.example",
                 "scrun.lua": "../../lua/scrun.lua",
                 "scrun-staging.lua": "../../lua/scrun-staging.lua"}


def _pyproject() -> dict[str, Any]:
    with open(REPO / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)


class TestPackageData:
    """The example site files: one copy in the source tree, at the paths the scripts and
    tests read (oci.conf.example, lua/), which scrun_py/examples/ links to, and what the
    build puts into the sdist and the wheel (scripts/build.sh compares their bytes)."""

    def test_links_to_the_source_files(self) -> None:
        examples = REPO / "scrun_py" / "examples"
        for name, target in EXAMPLE_LINKS.items():
            assert target == os.readlink(examples / name), name
            assert (examples / name).resolve().is_file(), name
        assert not (examples / "scrun-py.toml").is_symlink()

    def test_every_example_is_package_data(self) -> None:
        """pyproject.toml's package data holds examples/, MANIFEST.in the sdist's copy."""
        data = _pyproject()["tool"]["setuptools"]["package-data"]
        assert ["examples/*"] == data["scrun_py"]
        assert "recursive-include scrun_py/examples *" in \
            (REPO / "MANIFEST.in").read_text().splitlines()
        from scrun_py.commands.examples import EXAMPLES

        assert sorted(p.name for p in (REPO / "scrun_py" / "examples").iterdir()) == \
            sorted(e.file for e in EXAMPLES)


class TestDependencies:
    def test_upper_bounds(self) -> None:
        """Each dependency stops before its next major release, but structlog, whose
        versions are calendar years (it announces removals a year ahead)."""
        deps = _pyproject()["project"]["dependencies"]
        names = {re.split(r"[<>=!~ ]", d)[0]: d for d in deps}
        assert {"click", "pydantic", "structlog", "lupa"} == set(names)
        for name, spec in names.items():
            assert ("<" in spec) == (name != "structlog"), spec

    def test_pyslurm_pinned_to_a_release_line(self) -> None:
        """pyslurm X.Y is built against Slurm X.Y only: each extra pins one line."""
        extras = _pyproject()["project"]["optional-dependencies"]
        assert ["pyslurm>=25.11,<25.12"] == extras["pyslurm-25.11"] == extras["pyslurm"]
        for name, reqs in extras.items():
            match = re.fullmatch(r"pyslurm-(\d+)\.(\d+)", name)
            if match:
                major, minor = int(match[1]), int(match[2])
                assert [f"pyslurm>={major}.{minor},<{major}.{minor + 1}"] == reqs
