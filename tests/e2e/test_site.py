# ruff: noqa: E501  (scrun(1)'s example below keeps the man page's long lines)
"""The site topology (docs/site.md): a configless login node apart from compute nodes
that share only /home and the scratch filesystem with it.

Runs against the site cluster of `scripts/cluster.sh up --slurm R --nodes 3` on Slurm
23.11 and later (SCRUN_TEST_SITE=1 in the environment `cluster.sh env` prints): this
machine is the login node, with sackd's copies of slurm.conf, oci.conf and scrun.lua in
/run/slurm/conf and no other slurm.conf; nodes n1..n3 have private /tmp, /var/tmp,
/dev/shm and /run and do not see the engines' storage.  The engines' bundles exist only
on the login node, so a container runs only through the site's scrun.lua (the shipped
lua/scrun-staging.lua with its bases on the shared scratch), or through the rsync
example of scrun(1) installed as a site admin copies it from the man page.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import test_engines as engines
from tests.e2e.conftest import (
    REPO_ROOT,
    SCRATCH,
    SCRUN,
    SITE,
    SLURM_PREFIX,
    SLURM_RELEASE,
    STATE,
    TEST_USER,
    Env,
    User,
    slurm_env,
)

pytestmark = pytest.mark.e2e

NODES = ["n1", "n2", "n3"]
CONFIGLESS = Path("/run/slurm/conf")
SITE_LUA = STATE / "scrun.lua"  # beside the controller's slurm.conf: configless ships it


@pytest.fixture(scope="module")
def site(cluster: Path) -> list[str]:
    """The site cluster's nodes (a one-machine cluster cannot run these tests)."""
    if not SITE:
        pytest.skip("not the site cluster: run scripts/cluster.sh up --slurm R --nodes 3 "
                    "(23.11+) and the env it prints (scripts/test.sh does)")
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], env=slurm_env(),
                         capture_output=True, text=True, timeout=30)
    assert 0 == out.returncode, out.stderr
    assert NODES == sorted(set(out.stdout.split()))
    return NODES


def on_node(node: str, script: str, user: User | None = None,
            jobid: int | None = None) -> subprocess.CompletedProcess[str]:
    """`sh -c script` as a step on `node` (a job of its own, or a step of `jobid`)."""
    argv = ["srun", "-w", node, "-N1", "-n1", "--time=2"]
    if jobid is not None:
        argv += ["--jobid", str(jobid), "--overlap"]
    argv += ["sh", "-c", script]
    who = user or User.named("root")
    return subprocess.run(who.argv(argv), env=who.env(), capture_output=True, text=True,
                          timeout=120, cwd="/", stdin=subprocess.DEVNULL)


def _paths_on(node: str, paths: list[str], jobid: int | None = None,
              user: User | None = None) -> dict[str, bool]:
    """Which of `paths` exist on `node`, seen from a step there (of job `jobid`: a step
    of the job's `user`)."""
    script = "; ".join(f"if test -e '{p}'; then echo yes; else echo no; fi" for p in paths)
    res = on_node(node, script, user=user, jobid=jobid)
    assert 0 == res.returncode, res.stderr
    return dict(zip(paths, [w == "yes" for w in res.stdout.split()], strict=True))


class TestTopology:
    def test_nodes_do_not_see_the_login_nodes_tmp(self, site: list[str]) -> None:
        """A file in the login node's /tmp, /var/tmp or /dev/shm is not on any node; one in
        the shared scratch or in /home is; each node has a hostname of its own."""
        tag = uuid.uuid4().hex[:8]
        local = [Path(d) / f"scrun-site-{tag}" for d in ("/tmp", "/var/tmp", "/dev/shm")]
        shared = [SCRATCH / f"scrun-site-{tag}", Path(User.named(TEST_USER).home) /
                  f".scrun-site-{tag}"]
        try:
            for p in [*local, *shared]:
                p.write_text("login node\n")
            for node in site:
                seen = _paths_on(node, [str(p) for p in [*local, *shared]])
                assert {str(p): False for p in local} | {str(p): True for p in shared} == seen
                res = on_node(node, "hostname")
                assert node == res.stdout.strip(), res.stderr
        finally:
            for p in [*local, *shared]:
                p.unlink(missing_ok=True)

    def test_nodes_do_not_see_the_engines_storage(self, site: list[str]) -> None:
        """The engines' storage of the login node (dockerd's data and exec roots, the
        machine's podman store, the test user's rootless podman store) is empty on a node."""
        store = [str(STATE / "docker"), "/var/lib/containers",
                 "/var/lib/scrun-py-test-rootless"]
        for p in store:
            assert os.listdir(p), f"{p} is empty on the login node"
        res = on_node(site[0], "; ".join(f"echo \"{p}: $(ls -A '{p}' | wc -l)\"" for p in store))
        assert 0 == res.returncode, res.stderr
        assert [f"{p}: 0" for p in store] == res.stdout.splitlines()

    def test_login_node_is_configless(self, site: list[str]) -> None:
        """No slurm.conf on the login node but sackd's: not at Slurm's compiled-in default
        (/etc/slurm, or the prefix of a built release), not in the environment; sackd's
        copies hold slurm.conf, oci.conf and the site's scrun.lua, and Slurm's clients
        work from them."""
        assert "SLURM_CONF" not in os.environ
        defaults = [Path("/etc/slurm/slurm.conf")]
        if SLURM_PREFIX:
            defaults.append(Path(SLURM_PREFIX) / "etc" / "slurm.conf")
        assert [] == [str(p) for p in defaults if p.exists() or p.is_symlink()]
        for name in ("slurm.conf", "oci.conf", "scrun.lua"):
            assert (CONFIGLESS / name).is_file(), name
        assert SITE_LUA.read_text() == (CONFIGLESS / "scrun.lua").read_text()
        assert f'local STAGING_BASE = "{SCRATCH}/%u/scrun-staging"' in SITE_LUA.read_text()
        user = User.named(TEST_USER)
        res = subprocess.run(user.argv(["sinfo", "-h", "-o", "%P"]), env=user.env(),
                             capture_output=True, text=True, timeout=30)
        assert 0 == res.returncode, res.stderr
        assert "debug*" in res.stdout.split()


class TestScrunPy:
    def test_runs_without_a_slurm_conf(self, site: list[str], user_env: Env) -> None:
        """scrun-py, given no -f and no SLURM_CONF, reads sackd's copies: a container
        whose bundle is in the login node's /tmp runs on a node through the site's
        scrun.lua (staged on the shared scratch), and the bundle is not on that node."""
        env = user_env
        work = Path("/tmp") / f"scrun-site-{uuid.uuid4().hex[:8]}"
        work.mkdir(mode=0o755)
        try:
            bundle = env.bundle(["sh", "-c", "echo ran; cat /marker"], name="bundle")
            moved = work / "bundle"
            shutil.move(str(bundle.path), moved)
            (moved / "rootfs" / "marker").write_text("staged\n")
            env.chown(work)
            user_env_vars = env.user.env()
            assert "SLURM_CONF" not in user_env_vars
            cid = f"site-{uuid.uuid4().hex[:8]}"
            created = env.create(cid, type(bundle)(moved), env=user_env_vars)
            assert 0 == created.rc, created.stderr()
            staged = str(env.state(cid)["bundle"])
            assert staged.startswith(f"{SCRATCH}/{env.user.uid}/scrun-staging/"), staged
            job = created.job_id()
            node = subprocess.run(["squeue", "-h", "-j", str(job), "-o", "%N"],
                                  env=slurm_env(), capture_output=True, text=True,
                                  timeout=30).stdout.strip()
            assert node in site
            assert {str(moved): False, staged: True} == _paths_on(
                node, [str(moved), staged], jobid=job, user=env.user)
            assert 0 == env.run("start", cid).returncode
            assert 0 == created.wait_exit(), created.stderr()
            assert ["ran", "staged"] == created.stdout().splitlines()
            assert 0 == env.run("delete", cid).returncode
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def test_shipped_default_staging_base_is_refused_on_a_node(self, site: list[str],
                                                               user_env: Env,
                                                               conf_dir: Path) -> None:
        """lua/scrun-staging.lua as shipped (STAGING_BASE on this machine's /tmp) refuses a
        job on another node with one line naming the setting, and leaves nothing."""
        env = user_env
        shutil.copy(REPO_ROOT / "lua" / "scrun-staging.lua",
                    conf_dir / "scrun.lua")
        bundle = env.bundle(["true"])
        created = env.create("refused", bundle, conf=conf_dir / "slurm.conf")
        assert 0 != created.rc
        errors = [str(r.get("msg", r.get("message", ""))) for r in env.errors()]
        assert any(re.search(r"STAGING_BASE /tmp/scrun-staging-%u is on this machine's own "
                             r"disk, which the job's nodes \(n\d\) do not see", e)
                   for e in errors), errors
        assert "Traceback" not in created.stderr()



@pytest.fixture(params=["docker", "podman-rootless"])
def site_engine(request: pytest.FixtureRequest, site: list[str]) -> Iterator[engines.Engine]:
    """docker (root) and the test user's rootless podman, configured by
    scripts/engines.sh with the login node's configuration (sackd's copies)."""
    problem = engines._engine_problem()
    if problem:
        pytest.skip(problem)
    name, _, who = str(request.param).partition("-")
    yield from engines._guarded(
        engines.Engine(name, User.named(TEST_USER if who == "rootless" else "root")))


def _engine_bundle(eng: engines.Engine, name: str) -> tuple[str, str]:
    """The bundle dir and rootfs the engine gave its runtime for container `name`, and
    the runtime's id of it."""
    cid = eng("inspect", "-f", "{{.Id}}", name).stdout.strip()
    assert re.fullmatch("[0-9a-f]{64}", cid), cid
    if eng.name == "docker":
        bundle = (STATE / "docker" / "exec" / "containerd" / "daemon" /
                  "io.containerd.runtime.v2.task" / "moby" / cid)
    else:
        bundle = Path(eng("inspect", "-f", "{{.StaticDir}}", name).stdout.strip())
    config = json.loads((bundle / "config.json").read_text())
    root = str(config["root"]["path"])
    if not root.startswith("/"):
        root = str(bundle / root)
    return str(bundle), root


def _engine_state(eng: engines.Engine, name: str) -> dict[str, object]:
    cid = eng("inspect", "-f", "{{.Id}}", name).stdout.strip()
    res = subprocess.run(eng.user.argv([str(SCRUN), "--root", str(eng.root), "state", cid]),
                         env=eng.user.env(), capture_output=True, text=True, timeout=60)
    assert 0 == res.returncode, res.stderr
    doc: dict[str, object] = json.loads(res.stdout)
    return doc


def _run_detached(eng: engines.Engine, tag: str) -> tuple[str, int, str]:
    """A container that reports its job and node, then waits: (name, job id, node)."""
    name = f"scrunpy-site-{tag}-{uuid.uuid4().hex[:8]}"
    res = eng.run("-d", "--name", name, eng.image, "sh", "-c",
                  'echo "job=$SLURM_JOB_ID node=$SLURMD_NODENAME"; '
                  "while :; do sleep 0.2; done")
    assert 0 == res.returncode, res.stderr
    deadline = time.monotonic() + 60
    while not (m := re.search(r"job=(\d+) node=(\S+)", eng.logs(name))):
        assert time.monotonic() < deadline, eng.logs(name)
        time.sleep(0.2)
    return name, int(m.group(1)), m.group(2)


@pytest.mark.engines
class TestEnginesThroughStaging:
    def test_bundle_is_not_on_the_node_and_the_container_runs(
            self, site_engine: engines.Engine, site: list[str]) -> None:
        """The bundle and rootfs the engine made exist on the login node only: a step on
        the container's node does not find them, but finds the staged copy on the shared
        scratch, from which the container runs there."""
        eng = site_engine
        name, job, node = _run_detached(eng, "stg")
        try:
            assert node in site
            bundle, rootfs = _engine_bundle(eng, name)
            assert Path(bundle, "config.json").is_file() and Path(rootfs, "bin").exists()
            staged = str(_engine_state(eng, name)["bundle"])
            assert staged.startswith(f"{SCRATCH}/{eng.user.uid}/scrun-staging/"), staged
            assert {bundle: False, rootfs: False, staged: True} == _paths_on(
                node, [bundle, rootfs, staged], jobid=job, user=eng.user)
        finally:
            eng.rm_force(name)

    def test_run_rm_prints_and_exits(self, site_engine: engines.Engine,
                                     site: list[str]) -> None:
        """`run --rm`: output and exit code of a container on a node, staged and cleaned."""
        res = site_engine.run("--rm", site_engine.image, "sh", "-c",
                              "echo on $SLURMD_NODENAME; exit 3")
        assert 3 == res.returncode, res.stderr
        assert re.fullmatch(r"on n[123]\n", res.stdout), res.stdout


# scrun(1)'s "Full Container staging example using rsync" (Slurm 26.05), as a site admin
# copies it from the man page into scrun.lua, with scratch_path set to the site's shared
# scratch and nothing else changed.
MAN_PAGE_EXAMPLE = """local open = io.open
local scratch_path = "/shared/scratch"

local function read_file(path)
     local file = open(path, "rb")
     if not file then return nil end
     local content = file:read "*all"
     file:close()
     return content
end

local function write_file(path, contents)
     local file = open(path, "wb")
     if not file then return nil end
     file:write(contents)
     file:close()
     return
end

function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
     slurm.log_debug(string.format("stage_in(%s, %s, %s, %s, %d, %d, %d)",
                 id, bundle, spool_dir, config_file, job_id, user_id, group_id))

     local status, output, user, rc
     local config = slurm.from_json(read_file(config_file))
     local src_rootfs = config["root"]["path"]
     rc, user = slurm.allocator_command(string.format("id -un %d", user_id))
     user = string.gsub(user, "%s+", "")
     local root = scratch_path.."/"..math.floor(user_id).."/slurm/scrun/"
     local dst_bundle = root.."/"..id.."/"
     local dst_config = root.."/"..id.."/config.json"
     local dst_rootfs = root.."/"..id.."/rootfs/"

     if string.sub(src_rootfs, 1, 1) ~= "/"
     then
          -- always use absolute path
          src_rootfs = string.format("%s/%s", bundle, src_rootfs)
     end

     status, output = slurm.allocator_command("mkdir -p "..dst_rootfs)
     if (status ~= 0)
     then
          slurm.log_info(string.format("mkdir(%s) failed %u: %s",
                      dst_rootfs, status, output))
          return slurm.ERROR
     end

     status, output = slurm.allocator_command(string.format("/usr/bin/env rsync --exclude sys --exclude proc --numeric-ids --delete-after --ignore-errors --stats -a -- %s/ %s/", src_rootfs, dst_rootfs))
     if (status ~= 0)
     then
          -- rsync can fail due to permissions which may not matter
          slurm.log_info(string.format("WARNING: rsync failed: %s", output))
     end

     slurm.set_bundle_path(dst_bundle)
     slurm.set_root_path(dst_rootfs)

     config["root"]["path"] = dst_rootfs

     -- Always force user namespace support in container or runc will reject
     local process_user_id = 0
     local process_group_id = 0

     if ((config["process"] ~= nil) and (config["process"]["user"] ~= nil))
     then
          -- resolve out user in the container
          if (config["process"]["user"]["uid"] ~= nil)
          then
               process_user_id=config["process"]["user"]["uid"]
          else
               process_user_id=0
          end

          -- resolve out group in the container
          if (config["process"]["user"]["gid"] ~= nil)
          then
               process_group_id=config["process"]["user"]["gid"]
          else
               process_group_id=0
          end

          -- purge additionalGids as they are not supported in rootless
          if (config["process"]["user"]["additionalGids"] ~= nil)
          then
               config["process"]["user"]["additionalGids"] = nil
          end
     end

     if (config["linux"] ~= nil)
     then
          -- force user namespace to always be defined for rootless mode
          local found = false
          if (config["linux"]["namespaces"] == nil)
          then
               config["linux"]["namespaces"] = {}
          else
               for _, namespace in ipairs(config["linux"]["namespaces"]) do
                    if (namespace["type"] == "user")
                    then
                         found=true
                         break
                    end
               end
          end
          if (found == false)
          then
               table.insert(config["linux"]["namespaces"], {type= "user"})
          end

          -- Provide default user map as root if one not provided
          if (true or config["linux"]["uidMappings"] == nil)
          then
               config["linux"]["uidMappings"] =
                    {{containerID=process_user_id, hostID=math.floor(user_id), size=1}}
          end

          -- Provide default group map as root if one not provided
          -- mappings fail with build???
          if (true or config["linux"]["gidMappings"] == nil)
          then
               config["linux"]["gidMappings"] =
                    {{containerID=process_group_id, hostID=math.floor(group_id), size=1}}
          end

          -- disable trying to use a specific cgroup
          config["linux"]["cgroupsPath"] = nil
     end

     if (config["mounts"] ~= nil)
     then
          -- Find and remove any user/group settings in mounts
          for _, mount in ipairs(config["mounts"]) do
               local opts = {}

               if (mount["options"] ~= nil)
               then
                    for _, opt in ipairs(mount["options"]) do
                         if ((string.sub(opt, 1, 4) ~= "gid=") and (string.sub(opt, 1, 4) ~= "uid="))
                         then
                              table.insert(opts, opt)
                         end
                    end
               end

               if (opts ~= nil and #opts > 0)
               then
                    mount["options"] = opts
               else
                    mount["options"] = nil
               end
          end

          -- Remove all bind mounts by copying files into rootfs
          local mounts = {}
          for i, mount in ipairs(config["mounts"]) do
               if ((mount["type"] ~= nil) and (mount["type"] == "bind") and (string.sub(mount["source"], 1, 4) ~= "/sys") and (string.sub(mount["source"], 1, 5) ~= "/proc"))
               then
                    status, output = slurm.allocator_command(string.format("/usr/bin/env rsync --numeric-ids --ignore-errors --stats -a -- %s %s", mount["source"], dst_rootfs..mount["destination"]))
                    if (status ~= 0)
                    then
                         -- rsync can fail due to permissions which may not matter
                         slurm.log_info("rsync failed")
                    end
               else
                    table.insert(mounts, mount)
               end
          end
          config["mounts"] = mounts
     end

     -- Force version to one compatible with older runc/crun at risk of new features silently failing
     config["ociVersion"] = "1.0.0"

     -- Merge in Job environment into container -- this is optional!
     if (config["process"]["env"] == nil)
     then
          config["process"]["env"] = {}
     end
     for _, env in ipairs(job_env) do
          table.insert(config["process"]["env"], env)
     end

     -- Remove all prestart hooks to squash any networking attempts
     if ((config["hooks"] ~= nil) and (config["hooks"]["prestart"] ~= nil))
     then
          config["hooks"]["prestart"] = nil
     end

     -- Remove all rlimits
     if ((config["process"] ~= nil) and (config["process"]["rlimits"] ~= nil))
     then
          config["process"]["rlimits"] = nil
     end

     write_file(dst_config, slurm.to_json(config))
     slurm.log_info("created: "..dst_config)

     return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir, config_file, jobid, user_id, group_id)
     if (root_path == nil)
     then
          root_path = ""
     end

     slurm.log_debug(string.format("stage_out(%s, %s, %s, %s, %s, %s, %s, %d, %d, %d)",
                 id, bundle, orig_bundle, root_path, orig_root_path, spool_dir, config_file, jobid, user_id, group_id))

     if (bundle == orig_bundle)
     then
          slurm.log_info(string.format("skipping stage_out as bundle=orig_bundle=%s", bundle))
          return slurm.SUCCESS
     end

     status, output = slurm.allocator_command(string.format("/usr/bin/env rsync --numeric-ids --delete-after --ignore-errors --stats -a -- %s/ %s/", root_path, orig_root_path))
     if (status ~= 0)
     then
          -- rsync can fail due to permissions which may not matter
          slurm.log_info("rsync failed")
     else
          -- cleanup temporary after they have been synced backed to source
          slurm.allocator_command(string.format("/usr/bin/rm --preserve-root=all --one-file-system -dr -- %s", bundle))
     end

     return slurm.SUCCESS
end

slurm.log_info("initialized scrun.lua")
return slurm.SUCCESS
"""


@pytest.fixture
def man_page_example(site: list[str]) -> Iterator[None]:
    """The man page's example as the site's scrun.lua: put beside the controller's
    slurm.conf, `scontrol reconfigure`, sackd fetches it; the site's own comes back after."""
    assert f'local scratch_path = "{SCRATCH}"' in MAN_PAGE_EXAMPLE
    before = SITE_LUA.read_text()
    try:
        _install_site_lua(MAN_PAGE_EXAMPLE)
        yield
    finally:
        _install_site_lua(before)


def _install_site_lua(text: str) -> None:
    """`text` as the controller's scrun.lua; `cluster.sh reconfigure`: scontrol reconfigure
    and sackd started again (it fetches the new file)."""
    SITE_LUA.write_text(text)
    res = subprocess.run([str(REPO_ROOT / "scripts" / "cluster.sh"), "reconfigure", "--slurm",
                          SLURM_RELEASE, "--nodes", str(len(NODES))], capture_output=True,
                         text=True, timeout=180)
    assert 0 == res.returncode, res.stderr
    assert text == (CONFIGLESS / "scrun.lua").read_text()


@pytest.mark.engines
class TestManPageExample:
    def test_runs_docker_and_podman_containers(self, man_page_example: None,
                                               site_engine: engines.Engine,
                                               site: list[str]) -> None:
        """The rsync example of scrun(1), unchanged but for scratch_path: a container of
        the engine runs on a node from the copy under scratch_path, its output and exit
        code come back, and the copy is gone afterwards."""
        eng = site_engine
        # docker gives the container the sysctl net.ipv4.ping_group_range "0 2147483647",
        # which the example keeps and crun cannot write in the example's user namespace
        # (one gid mapped): the run names a range of that gid instead
        extra = ["--sysctl", "net.ipv4.ping_group_range=0 0"] if eng.name == "docker" else []
        res = eng.run(*extra, "--rm", eng.image, "sh", "-c",
                      "echo example on $SLURMD_NODENAME; exit 4")
        assert 4 == res.returncode, res.stderr
        assert re.fullmatch(r"example on n[123]\n", res.stdout), res.stdout
        copies = SCRATCH / str(eng.user.uid) / "slurm" / "scrun"
        assert [] == (list(copies.iterdir()) if copies.exists() else [])
