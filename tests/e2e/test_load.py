"""Load: 50 containers through the CLI at once, and many clients querying one container.
(20 containers through podman at once: tests/e2e/test_engines.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import Env, spool_entries, traces

pytestmark = pytest.mark.e2e

N_CONTAINERS = 50
N_CLIENTS = 20
ORDER = {"creating": 0, "created": 1, "running": 2, "stopped": 3}


def _bundles(env: Env, n: int) -> list[Path]:
    """n bundles (rootfs hard-linked from one), container i printing its id and exiting
    i % 7."""
    base = env.bundle(["true"], name="base")
    cfg = base.config()
    out = []
    for i in range(n):
        d = env.work / f"b{i}"
        d.mkdir()
        shutil.copytree(base.path / "rootfs", d / "rootfs", symlinks=True,
                        copy_function=os.link)
        cfg["process"]["args"] = ["sh", "-c", f"echo load-{i}; exit {i % 7}"]  # type: ignore[index]
        (d / "config.json").write_text(json.dumps(cfg))
        out.append(d)
    env.chown(env.work)
    return out


class TestLoad:
    @pytest.mark.case("L-01")
    def test_fifty_concurrent_runs(self, user_env: Env) -> None:
        """50 `scrun-py run` at once (they queue: 16 job slots): every container runs,
        prints its own id and returns its own exit code; nothing is left."""
        env = user_env
        bundles = _bundles(env, N_CONTAINERS)
        procs = []
        for i, bundle in enumerate(bundles):
            with open(env.work / f"load-{i}.out", "wb") as fo, \
                    open(env.work / f"load-{i}.err", "wb") as fe:
                procs.append(subprocess.Popen(
                    env.cmd("run", "--bundle", str(bundle), f"load-{i}"), env=env.user.env(),
                    cwd=env.work, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe))
        deadline = time.monotonic() + 420
        rcs = []
        for proc in procs:
            rcs.append(proc.wait(timeout=max(1, deadline - time.monotonic())))
        wrong = []
        for i, rc in enumerate(rcs):
            out = (env.work / f"load-{i}.out").read_text()
            if rc != i % 7 or out != f"load-{i}\n":
                err = (env.work / f"load-{i}.err").read_text()
                wrong.append(f"load-{i}: rc={rc} out={out!r} err={err[-300:]!r}")
        assert [] == wrong
        assert [] == [r for r in env.errors() if r.get("level") == "error"]
        assert [] == traces(env)
        assert not env.root.exists() or [] == spool_entries(env.root)
        shutil.rmtree(env.work / "base", ignore_errors=True)

    @pytest.mark.case("L-02")
    def test_concurrent_state_queries(self, user_env: Env) -> None:
        """20 clients poll `state` while the container is created, started and exits:
        every answer is valid JSON with a legal status that never goes backwards."""
        env = user_env
        bundle = env.bundle(["sh", "-c", "sleep 2; echo done; exit 3"])
        done = threading.Event()
        seen: list[list[str]] = [[] for _ in range(N_CLIENTS)]
        problems: list[str] = []

        def poll(k: int) -> None:
            while not done.is_set():
                res = subprocess.run(env.cmd("state", "q", log=False), env=env.user.env(),
                                     capture_output=True, text=True, timeout=60)
                if res.returncode != 0:
                    if "container does not exist" not in res.stderr or seen[k]:
                        problems.append(f"client {k}: rc={res.returncode} {res.stderr!r}")
                    continue
                try:
                    doc = json.loads(res.stdout)
                except ValueError:
                    problems.append(f"client {k}: not JSON: {res.stdout!r}")
                    continue
                status = doc.get("status")
                if status not in ORDER or doc.get("id") != "q":
                    problems.append(f"client {k}: bad document {doc!r}")
                    continue
                if seen[k] and ORDER[status] < ORDER[seen[k][-1]]:
                    problems.append(f"client {k}: {seen[k][-1]} -> {status}")
                seen[k].append(status)
                if status == "stopped":
                    return

        threads = [threading.Thread(target=poll, args=(k,), daemon=True)
                   for k in range(N_CLIENTS)]
        for t in threads:
            t.start()
        try:
            created = env.create("q", bundle)
            assert 0 == created.rc, created.stderr()
            time.sleep(1)
            assert 0 == env.run("start", "q").returncode
            assert 3 == created.wait_exit()
            for t in threads:
                t.join(timeout=60)
        finally:
            done.set()
        assert [] == problems
        assert all(s and s[-1] == "stopped" for s in seen), seen
        statuses = {st for s in seen for st in s}
        assert {"created", "running", "stopped"} <= statuses
        assert "done\n" == created.stdout()
        assert 0 == env.run("delete", "q").returncode
        assert [] == traces(env, "q")
