"""A real anchor process for the tests that need one apart from pytest's (a flood of
connections against its own descriptor limit, a SIGSTOP, a SIGKILL): anchor/__main__.py's
`_run` on the fake Slurm backend, started as
`python -m tests.unit.anchor_child SPEC_FILE NOFILE`, which lowers its own
RLIMIT_NOFILE to NOFILE first.  `AnchorChild` starts one and waits for it to be ready.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

from scrun_py.anchor import readiness
from scrun_py.anchor.handoff import AnchorSpec, BundleInfo, ConfigInfo, ProcessInfo
from scrun_py.container import spool
from scrun_py.container.handle import Container

CID = "c1"
REPO = Path(__file__).resolve().parents[2]


def make_spec(tmp: Path, ready_fd: int) -> AnchorSpec:
    """The spec of container c1 in `tmp`/root, logging everything to `tmp`/anchor.log."""
    root = tmp / "root"
    spool.ensure_root(root)
    spool.make_container_dir(root, CID)
    bundle = tmp / "bundle"
    (bundle / "rootfs").mkdir(parents=True, exist_ok=True)
    info = BundleInfo(path=str(bundle), rootfs=str(bundle / "rootfs"),
                      config=ConfigInfo(ociVersion="1.0.2", process=ProcessInfo(["true"])))
    return AnchorSpec(
        container_id=CID, root=str(root), orig_bundle=str(bundle), pid_file="",
        console_socket="", log_path=str(tmp / "anchor.log"), log_format="json", debug=True,
        verbosity=0, slurm_conf=str(tmp / "slurm.conf"), ready_fd=ready_fd, created="now",
        bundle_info=info.to_dict())


class AnchorChild:
    """The anchor of container c1 under `tmp`/root in a process of its own, ready (its
    record says created) once constructed; its stderr goes to `tmp`/anchor.stderr."""

    def __init__(self, tmp: Path, nofile: int) -> None:
        r, w = os.pipe()
        self.spec = make_spec(tmp, w)
        self.root = Path(self.spec.root)
        self.log = Path(self.spec.log_path)
        self.stderr = tmp / "anchor.stderr"
        spec_file = tmp / "spec.json"
        spec_file.write_text(self.spec.to_json())
        env = {k: v for k, v in os.environ.items()
               if k not in ("SLURM_JOB_ID", "SCRUN_PY_LUA", "SCRUN_PY_ALLOC_TIMEOUT")}
        env["SCRUN_PY_SLURM_BACKEND"] = "cli"
        with self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.unit.anchor_child", str(spec_file), str(nofile)],
                cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                pass_fds=(w,))
        os.close(w)
        try:
            self.ready = readiness.read_result(r, 30)
        finally:
            os.close(r)
        assert self.ready is not None and self.ready["ok"], (self.ready, self.output())

    @property
    def dir(self) -> Path:
        return self.root / CID

    @property
    def socket_path(self) -> str:
        return str(self.dir / spool.SOCKET_NAME)

    def request(self, kind: str, **fields: Any) -> dict[str, Any]:
        """One request through the real client, answered within 5 s or failing."""
        return Container(str(self.root), CID).request(kind, 5, **fields)

    def output(self) -> str:
        """What the anchor wrote to stderr and to its log."""
        texts = [p.read_text(errors="replace") for p in (self.stderr, self.log) if p.exists()]
        return "\n".join(texts)

    def stop(self) -> int | None:
        """Kill the anchor if it still runs; its exit status."""
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.wait(10)


def main() -> None:
    from scrun_py.anchor import __main__ as anchor_main
    from scrun_py.slurm import cli_backend
    from tests.unit.anchor_harness import quiet_logger
    from tests.unit.fake_slurm import FakeSlurm

    spec_file, nofile = sys.argv[1], int(sys.argv[2])
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(nofile, hard), hard))
    backend = FakeSlurm()
    cli_backend.CliSlurm = lambda **_kw: backend  # type: ignore[assignment,misc]
    spec = AnchorSpec.from_json(Path(spec_file).read_text())
    rc = anchor_main._run(spec, quiet_logger())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


if __name__ == "__main__":
    main()
