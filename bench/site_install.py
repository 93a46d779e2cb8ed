"""scrun-py installed the way a site installs it, for bench/run.py and bench/timeline.py:
a regular (not editable) `pip install` of this checkout into a fresh virtualenv, made by
the ordinary test user in their home directory, from a copy of the working tree they own.

The test virtualenv of scripts/cluster.sh differs in ways that matter for start-up time:
an editable install, byte code written by root, a newer pip (whose console-script
wrapper does not import re).  Measuring there hid about 100 ms per container.
"""

from __future__ import annotations

import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def as_user(pw: pwd.struct_passwd, argv: list[str]) -> list[str]:
    """`argv` as the user `pw`, with their groups (bench/run.py's rows run this way)."""
    return ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups", "--",
            *argv]


def make(pw: pwd.struct_passwd, python: str = "/usr/bin/python3") -> Path:
    """A fresh virtualenv in the user's home with scrun-py pip-installed; its path."""
    started = time.monotonic()
    home = Path(pw.pw_dir) / ".cache" / "scrun-py-bench"
    venv, src = home / "venv", home / "src"
    env = {"HOME": pw.pw_dir, "USER": pw.pw_name, "PATH": "/usr/bin:/bin"}
    subprocess.run(as_user(pw, ["rm", "-rf", str(venv), str(src)]), check=True, env=env)
    subprocess.run(as_user(pw, ["mkdir", "-p", str(src)]), check=True, env=env)
    # the working tree as it is (tracked and new files, not the ignored ones)
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], cwd=REPO, check=True,
                           capture_output=True).stdout.split(b"\0")
    with tempfile.TemporaryDirectory() as tmp:
        for name in filter(None, files):
            rel = name.decode()
            if (REPO / rel).is_file():
                (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / rel, Path(tmp) / rel)
        subprocess.run(["chmod", "-R", "a+rX", tmp], check=True)
        subprocess.run(as_user(pw, ["cp", "-r", f"{tmp}/.", str(src)]), check=True, env=env)
    subprocess.run(as_user(pw, [python, "-m", "venv", str(venv)]), check=True, env=env)
    res = subprocess.run(as_user(pw, [str(venv / "bin" / "pip"), "install", "-q", str(src)]),
                         env=env, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"pip install of the checkout as {pw.pw_name} failed:\n"
                         f"{res.stderr[-2000:]}")
    print(f"[bench] scrun-py pip-installed as {pw.pw_name} into {venv} "
          f"({time.monotonic() - started:.0f} s)", flush=True)
    return venv
