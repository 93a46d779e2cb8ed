"""`--version`: runc's lines, adapted (the version, the commit of a source checkout or of
the one a wheel was built from, the OCI spec, then Python and the Slurm release found).
The numbers themselves have their one home in the package's __init__ (pyproject.toml
reads __version__ from there)."""

from __future__ import annotations

from scrun_py import OCI_SPEC_VERSION, __version__

# `--version` imports nothing beyond this package (tests/unit/test_imports.py): the
# helpers below use os and time only, which every interpreter has loaded at start-up.
#: how long `--version` waits for `srun --version`
SLURM_PROBE_TIMEOUT_S = 2.0


def version_text() -> str:
    """runc's `--version` lines, adapted: version, commit, spec, then python and slurm
    where runc has go and libseccomp.  go-runc reads the `commit:` and `spec:` lines;
    dockerd takes any line containing the word "version" for the version line, so only
    the first one may contain it."""
    import sys

    python = ".".join(str(n) for n in sys.version_info[:3])
    return (f"scrun-py version {__version__}\ncommit: {git_commit()}\n"
            f"spec: {OCI_SPEC_VERSION}\npython: {python}\nslurm: {slurm_release()}")


#: the file the build writes the commit into (setup.py), beside the package's __init__
BUILD_COMMIT_FILE = "_commit.txt"


def git_commit(top: str | None = None) -> str:
    """The commit checked out in the git work tree this package is imported from (an
    editable install, or a run from the source tree); else the commit the package was
    built from (an installed wheel, an unpacked sdist); 'unknown' otherwise.

    A work tree's is read from .git (HEAD, the loose ref, packed-refs): no git process.
    `top` is the directory holding scrun_py/ (this package's parent by default); it
    counts as the source tree only with pyproject.toml beside it, so a package copied
    into some other repository does not report that repository's commit.  Where there
    is no source tree with a .git, the commit is the one setup.py wrote into
    scrun_py/_commit.txt when the sdist or the wheel was built from a git checkout."""
    import os

    if top is None:
        top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    git_dir = os.path.join(top, ".git")
    if not (os.path.isfile(os.path.join(top, "pyproject.toml")) and os.path.exists(git_dir)):
        return _build_commit(os.path.join(top, "scrun_py", BUILD_COMMIT_FILE))
    try:
        if os.path.isfile(git_dir):  # a linked work tree or a submodule: "gitdir: PATH"
            git_dir = os.path.join(top, _read(git_dir).removeprefix("gitdir:").strip())
        head = _read(os.path.join(git_dir, "HEAD")).strip()
        if not head.startswith("ref:"):
            return head if _is_sha(head) else "unknown"  # a detached HEAD
        ref = head.removeprefix("ref:").strip()
        common = git_dir
        if os.path.isfile(os.path.join(git_dir, "commondir")):  # a linked work tree
            common = os.path.join(git_dir, _read(os.path.join(git_dir, "commondir")).strip())
        for where in (git_dir, common):
            try:
                sha = _read(os.path.join(where, ref)).strip()
            except OSError:
                continue
            if _is_sha(sha):
                return sha
        for line in _read(os.path.join(common, "packed-refs")).splitlines():
            sha, _, name = line.partition(" ")
            if name == ref and _is_sha(sha):
                return sha
    except (OSError, UnicodeDecodeError):
        pass
    return "unknown"


def _build_commit(path: str) -> str:
    """The commit in the build's file `path`, or 'unknown' (no file, not a commit)."""
    try:
        sha = _read(path).strip()
    except (OSError, UnicodeDecodeError):
        return "unknown"
    return sha if _is_sha(sha) else "unknown"


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _is_sha(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


def slurm_release(environ: dict[str, str] | None = None,
                  timeout_s: float = SLURM_PROBE_TIMEOUT_S) -> str:
    """The release `srun --version` reports (`22.05.8`), or 'unknown'.

    `--version` asks srun here, with a runner of its own (`_output`), rather than
    through slurm/runner.py: this module may import nothing but the version numbers
    (tests/unit/test_imports.py), and subprocess alone takes longer to import than srun
    takes to answer.

    srun is not run when $SLURM_CONF names a missing file: 22.05's srun then retries
    reading it for 60 s, even for --version.  Otherwise it runs for at most `timeout_s`
    (it reads slurm.conf, or asks DNS for a configless controller); it takes about 5 ms."""
    import os

    env = dict(os.environ if environ is None else environ)
    conf = env.get("SLURM_CONF")
    if conf and not os.path.isfile(conf):
        return "unknown"
    status, out = _output(["srun", "--version"], env, timeout_s)
    release = parse_release(out.decode(errors="replace"))
    return release if status == 0 and release else "unknown"


def parse_release(text: str) -> str | None:
    """What `srun --version` prints ("slurm 22.05.8", "slurm-wlm 24.11.1") → its release,
    the last word ("22.05.8"); None when that does not start with a digit.  The one
    reader of that line: slurm/parse.py `parse_version` takes (major, minor) from it,
    and base/ imports no other layer."""
    words = text.split()
    return words[-1] if words and words[-1][:1].isdigit() else None


def _resolve_program(name: str, env: dict[str, str]) -> str | None:
    """base/procs.py `resolve_program`'s search for a bare `name`, without importing
    procs: the first executable file of that name in an absolute entry of `env`'s PATH
    (os.defpath's when it has none; an empty or relative entry names a directory
    relative to wherever scrun-py runs); None when there is none.  PATH is read here
    rather than by os.get_exec_path, which imports warnings."""
    import os

    for entry in env.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(entry, name)
        if os.path.isabs(entry) and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _output(argv: list[str], env: dict[str, str], timeout_s: float) -> tuple[int | None, bytes]:
    """The exit status and stdout of `argv` (its program found by _resolve_program), or
    None for a status when it could not start or ran past `timeout_s` (then its process
    group is killed).  Started with posix_spawn, not subprocess, whose import alone
    takes longer than srun."""
    import os

    program = _resolve_program(argv[0], env)
    if program is None:
        return None, b""
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        try:
            pid = os.posix_spawn(program, argv, env, setsid=True,
                                 file_actions=[(os.POSIX_SPAWN_DUP2, null, 0),
                                               (os.POSIX_SPAWN_DUP2, write_end, 1),
                                               (os.POSIX_SPAWN_DUP2, null, 2)])
        finally:
            os.close(null)
    except OSError:
        os.close(read_end)
        return None, b""
    finally:
        os.close(write_end)
    return _collect(pid, read_end, timeout_s)


def _collect(pid: int, read_end: int, timeout_s: float) -> tuple[int | None, bytes]:
    """What the child `pid` writes to `read_end` (closed here) until it exits, and its
    status; None for a status when it outlives `timeout_s` (its group is killed)."""
    import os
    import time

    out = b""
    deadline = time.monotonic() + timeout_s
    try:
        os.set_blocking(read_end, False)
        while True:
            try:
                while chunk := os.read(read_end, 4096):
                    out += chunk
            except BlockingIOError:
                pass
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                try:
                    out += os.read(read_end, 4096)
                except BlockingIOError:
                    pass
                return os.waitstatus_to_exitcode(wait_status), out
            if time.monotonic() >= deadline:
                try:
                    os.killpg(pid, 9)  # SIGKILL: the signal module is not loaded here
                except ProcessLookupError:
                    pass
                os.waitpid(pid, 0)
                return None, out
            time.sleep(0.001)
    finally:
        os.close(read_end)
