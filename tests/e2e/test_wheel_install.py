"""The wheel as a site installs it (docs/install.md): built by scripts/build.sh, installed
by the ordinary test user into a fresh virtualenv of their own, offline from a
wheelhouse (`pip install --no-index --find-links`), which root made with `pip download`
beside the wheel (the one step that needs the package index).  The installed scrun-py
prints its example site files; the test puts the printed oci.conf, scrun.lua and
scrun-py.toml beside a slurm.conf of its own and runs a container with them on the
test cluster as an engine does (create, list, start, the anchor's exit status, delete):
its output, its exit code and its job, named after the container, come back.  Then
`pip uninstall` removes the command."""

# Expected value first, as everywhere in our tests (hence SIM300 is off for tests/).

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import STATE, VENV, Env, leftovers, squeue, wait_anchor

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
VERSION = next(line.split('"')[1] for line in
               (REPO / "scrun_py" / "__init__.py").read_text().splitlines()
               if line.startswith("__version__ = "))
#: the interpreter a site's virtualenv is made with (Python >= 3.11)
PYTHON = "/usr/bin/python3"
#: pip without the machine's or the user's configuration, the cache or a version check
PIP_ENV = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_CACHE_DIR": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def built_wheel() -> Path:
    """scripts/build.sh's wheel (built now unless dist/ holds a current one)."""
    res = subprocess.run([str(REPO / "scripts" / "build.sh"), "--if-stale"], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert 0 == res.returncode, res.stderr
    wheel = Path(res.stdout.strip().splitlines()[-1])
    assert f"scrun_py-{VERSION}-py3-none-any.whl" == wheel.name
    return wheel


def pinned_dependencies() -> list[str]:
    """name==version of the test virtualenv's packages (scrun-py's dependencies among
    them), so the wheelhouse holds the versions the suite runs on."""
    res = subprocess.run([str(VENV / "bin" / "pip"), "freeze", "--exclude-editable"],
                         env={**os.environ, **PIP_ENV}, capture_output=True, text=True,
                         timeout=120)
    assert 0 == res.returncode, res.stderr
    return [line for line in res.stdout.splitlines()
            if "==" in line and not line.lower().startswith(("scrun-py", "scrun_py"))]


@pytest.fixture(scope="module")
def wheelhouse() -> Iterator[Path]:
    """A directory every user can read: the wheel and every wheel it depends on, as
    `pip download` fetches them (root's step, on a machine that reaches the index)."""
    house = Path(tempfile.mkdtemp(prefix="scrun-py-wheelhouse-"))
    try:
        wheel = built_wheel()
        constraints = house / "constraints.txt"
        constraints.write_text("\n".join(pinned_dependencies()) + "\n")
        res = subprocess.run(
            [str(VENV / "bin" / "pip"), "download", "--quiet", "--dest", str(house),
             "--only-binary", ":all:", "-c", str(constraints), str(wheel)],
            env={**os.environ, **PIP_ENV}, capture_output=True, text=True, timeout=600)
        assert 0 == res.returncode, res.stderr
        constraints.unlink()
        os.chmod(house, 0o755)
        for f in house.iterdir():
            os.chmod(f, 0o644)
        yield house
    finally:
        shutil.rmtree(house, ignore_errors=True)


def as_user(env: Env, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`argv` as the test user, in their environment plus PIP_ENV, in their work dir."""
    return subprocess.run(env.user.argv(argv), env=env.user.env(**PIP_ENV),
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          cwd=env.work, timeout=timeout)


class TestWheelInstall:
    def test_install_print_examples_and_run(self, user_env: Env, conf_dir: Path,
                                            wheelhouse: Path) -> None:
        env = user_env
        venv = env.work / "site-venv"
        res = as_user(env, [PYTHON, "-m", "venv", str(venv)], timeout=300)
        assert 0 == res.returncode, res.stderr
        # offline: the wheelhouse is the only place pip looks
        res = as_user(env, [str(venv / "bin" / "pip"), "install", "--no-index",
                            "--find-links", str(wheelhouse), f"scrun-py=={VERSION}"],
                      timeout=600)
        assert 0 == res.returncode, res.stderr
        scrun = venv / "bin" / "scrun-py"
        res = as_user(env, [str(venv / "bin" / "python"), "-P", "-c",
                            "import scrun_py; print(scrun_py.__file__)"], timeout=60)
        assert 0 == res.returncode, res.stderr
        assert Path(res.stdout.strip()).is_relative_to(venv), res.stdout  # not the checkout
        res = as_user(env, [str(scrun), "--version"], timeout=60)
        assert 0 == res.returncode, res.stderr
        assert f"scrun-py version {VERSION}" == res.stdout.splitlines()[0]

        res = as_user(env, [str(scrun), "example"], timeout=60)
        assert 0 == res.returncode, res.stderr
        names = [line.split()[0] for line in res.stdout.splitlines() if line[:1].isalnum()]
        assert {"oci.conf", "scrun.lua", "scrun-staging.lua", "scrun-py.toml"} <= set(names)
        printed: dict[str, str] = {}
        for name in ("oci.conf", "scrun.lua", "scrun-staging.lua", "scrun-py.toml"):
            res = as_user(env, [str(scrun), "example", name], timeout=60)
            assert (0, "") == (res.returncode, res.stderr), name
            printed[name] = res.stdout
        # what the wheel carries is the source tree's
        assert (REPO / "oci.conf.example").read_text() == printed["oci.conf"]
        assert (REPO / "lua" / "scrun-staging.lua").read_text() == printed["scrun-staging.lua"]
        # the nodes' oci.conf (slurmstepd reads the cluster's) is the example's settings
        active = [line for line in printed["oci.conf"].splitlines()
                  if line.strip() and not line.lstrip().startswith("#")]
        assert (STATE / "oci.conf").read_text().splitlines() == active

        for name in ("oci.conf", "scrun.lua", "scrun-py.toml"):
            (conf_dir / name).write_text(printed[name])
            os.chmod(conf_dir / name, 0o644)
        bundle = env.bundle(["sh", "-c", "echo hello; exit 3"])
        # as an engine runs it: create, start, the anchor's exit status, delete
        base = [str(scrun), "--root", str(env.root), "--log", str(env.log), "--log-format",
                "json", "-f", str(conf_dir / "slurm.conf")]
        out, err = env.work / "wheel-c.out", env.work / "wheel-c.err"
        pid_file = env.work / "wheel-c.pid"
        # files, not pipes: the container (its anchor) keeps create's stdout and stderr
        with open(out, "wb") as fo, open(err, "wb") as fe:
            created = subprocess.run(
                env.user.argv([*base, "create", "--bundle", str(bundle.path), "--pid-file",
                               str(pid_file), "wheel-c"]),
                env=env.user.env(), stdin=subprocess.DEVNULL, stdout=fo, stderr=fe,
                cwd=env.work, timeout=300)
        assert 0 == created.returncode, err.read_text()
        anchor = int(pid_file.read_text())
        env.anchors.append(anchor)
        res = as_user(env, [*base, "list", "--format", "json"], timeout=60)
        assert 0 == res.returncode, res.stderr
        [listed] = json.loads(res.stdout)
        assert ("wheel-c", "created") == (listed["id"], listed["status"])
        # the job is named after the container
        assert "wheel-c\n" == squeue("-j", str(listed["slurmJobId"]), "-o", "%j")
        res = as_user(env, [*base, "start", "wheel-c"], timeout=120)
        assert (0, "") == (res.returncode, res.stderr)
        assert 3 == wait_anchor(anchor)
        assert ("hello\n", "") == (out.read_text(), err.read_text())
        res = as_user(env, [*base, "delete", "wheel-c"], timeout=120)
        assert (0, "") == (res.returncode, res.stderr)
        assert [] == [r for r in env.log_records() if r.get("level") == "error"]
        assert [] == leftovers(env, "wheel-c", [int(listed["slurmJobId"])])

        res = as_user(env, [str(venv / "bin" / "pip"), "uninstall", "--yes", "scrun-py"],
                      timeout=120)
        assert 0 == res.returncode, res.stderr
        assert not scrun.exists()
