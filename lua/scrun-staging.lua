--[[
scrun-staging.lua: a scrun.lua for clusters where the compute nodes cannot see the
container storage of the login node (docker/podman keep the rootfs in a local directory).

stage_in copies the rootfs to STAGING_BASE/<container id>/rootfs, writes a config.json
next to it that rootless crun can run as the job user, and points scrun-py at the copy.
stage_out copies the changed rootfs back and removes the copy.

Install it as scrun.lua next to slurm.conf (or point SCRUN_PY_LUA at it).  Needs rsync,
cp, realpath, chmod, id (coreutils), find (findutils) and a POSIX shell.  See docs/hooks.md.
]]

---------------------------------------------------------------------------- settings
-- Where the copies go; "%u" becomes the job user's uid.  Must be readable at the same
-- path on every node of the job: the /tmp default is only right for one-node clusters,
-- so set this to a shared filesystem (e.g. "/shared/scratch/%u/scrun") elsewhere.
local STAGING_BASE = "/tmp/scrun-staging-%u"
-- Copy the rootfs back to the original after the container ends (keeps its changes).
local SYNC_BACK = true
-- Append the job's environment ("NAME=value" strings) to process.env.
local ADD_JOB_ENV = false
-- Bind mounts whose source is under one of these are kept: they exist on every node.
local NODE_LOCAL = { "/dev", "/proc", "/sys" }
-- rsync exit codes that still mean "copied": 24 is "some source files vanished".
local RSYNC = "rsync --archive --numeric-ids --delete"
local RSYNC_OK = { [0] = true, [24] = true }
-- Makes the copy RSYNC makes (no hard links, xattrs or SELinux labels: RSYNC has no -H,
-- -X; only POSIX ACLs, rare in images, are kept where RSYNC has no -A) in one process
-- instead of rsync's three and their protocol: about half the time for a rootfs, a
-- twentieth for a single file.  Used only where RSYNC's --delete would have nothing to
-- delete; if it fails, RSYNC does the copy and its status counts.
local CP = "cp -a --no-preserve=links,xattr,context"
------------------------------------------------------------------------------------

local format = string.format

local function q(s)
  return "'" .. (tostring(s):gsub("'", [['\'']])) .. "'"
end

local function sh(cmd, ok_codes, what)
  local status, output = slurm.allocator_command(cmd)
  if not (ok_codes or { [0] = true })[status] then
    -- the script's text is long (engines cut long errors): say what it did, and its output
    slurm.log_error("scrun-staging: %s failed with status %s: %s", what or cmd,
                    tostring(status), ((output or ""):gsub("%s+$", "")))
    return false
  end
  return true
end

local function rsync_ok_codes()
  local codes = {}
  for code in pairs(RSYNC_OK) do table.insert(codes, tostring(code)) end
  table.sort(codes)
  return table.concat(codes, "|")
end

-- Shell functions that copy like RSYNC, with CP where it gives the same result.
-- Not as root, cp leaves out the set-uid/gid and sticky bits of a file whose owner it
-- cannot set, where rsync sets the mode anyway: those modes are set again.
local COPY_FUNCTIONS = table.concat({
  "rsync_copy() { " .. RSYNC .. ' "$@" || { _s=$?; case $_s in '
    .. rsync_ok_codes() .. ") ;; *) return $_s;; esac; }; }",
  'is_empty() { for _f in "$1"/* "$1"/.[!.]* "$1"/..?*; do '
    .. 'if [ -e "$_f" ] || [ -L "$_f" ]; then return 1; fi; done; }',
  -- copy_dir SRC DIR: DIR (a directory) as `rsync SRC/ DIR/` leaves it
  'copy_dir() { { is_empty "$2" && ' .. CP .. ' -- "$1/." "$2/" 2>/dev/null && { '
    .. '[ "$(id -u)" = 0 ] || (cd "$1" && find . -perm /7000 ! -type l -exec sh -c '
    .. [['for f; do chmod --reference="$f" -- "$0/$f"; done' "$2" {} +); }; } ]]
    .. '|| rsync_copy "$1/" "$2/"; }',
  -- copy_file SRC DEST: DEST as `rsync SRC DEST` leaves it
  'copy_file() { { [ ! -d "$2" ] && ' .. CP .. ' --remove-destination -- "$1" "$2" '
    .. '2>/dev/null && { [ -L "$1" ] || ! { [ -u "$1" ] || [ -g "$1" ] || [ -k "$1" ]; } '
    .. '|| [ "$(id -u)" = 0 ] || chmod --reference="$1" -- "$2"; }; } '
    .. '|| rsync_copy "$1" "$2"; }',
}, "\n")

-- lend_w DIR: make DIR writable by its owner until give_back_w (modes restored in reverse)
local LEND_FUNCTIONS = table.concat({
  'lent=""',
  'lend_w() { if [ -d "$1" ] && [ ! -w "$1" ]; then '
    .. 'lent="$(stat -c %a -- "$1") $1\n$lent"; chmod u+w -- "$1"; fi; }',
  'give_back_w() { printf "%s" "$lent" | while read -r m f; do '
    .. 'if [ -n "$f" ]; then chmod "$m" -- "$f"; fi; done; lent=""; }',
}, "\n")

local function paths(id, user_id)
  if id == "." or id == ".." or id:find("[^%w%+%-%._]") then
    error("container id not usable as a directory name: " .. id)
  end
  local base = (STAGING_BASE:gsub("%%u", tostring(math.floor(user_id))))
  local staging = base .. "/" .. id
  return base, staging, staging .. "/rootfs"
end

local function remove(staging)
  return sh(format("chmod -R u+rwX -- %s 2>/dev/null || true\nrm -rf -- %s",
                   q(staging), q(staging)))
end

local function read_file(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local data = f:read("*a")
  f:close()
  return data
end

local function write_file(path, data)
  local f, err = io.open(path, "wb")
  if not f then return nil, err end
  f:write(data)
  f:close()
  return true
end

local function is_node_local(path)
  for _, prefix in ipairs(NODE_LOCAL) do
    if path == prefix or path:sub(1, #prefix + 1) == prefix .. "/" then return true end
  end
  return false
end

-- Make config.json runnable by rootless crun as the job user on a compute node.
-- Returns the bind mounts whose sources must be copied into the rootfs.
local function rewrite_config(config, staged_root, user_id, group_id, job_env)
  config.root = config.root or slurm.json_object()
  config.root.path = staged_root

  local process = config.process or slurm.json_object()
  config.process = process
  process.rlimits = nil
  local user = process.user or slurm.json_object()
  process.user = user
  user.additionalGids = nil
  if ADD_JOB_ENV then
    process.env = process.env or slurm.json_array()
    for _, entry in ipairs(job_env) do table.insert(process.env, entry) end
  end

  local linux = config.linux or slurm.json_object()
  config.linux = linux
  linux.cgroupsPath = nil
  -- docker sets ping_group_range to every gid; only the job's gid is mapped here.
  if linux.sysctl then linux.sysctl["net.ipv4.ping_group_range"] = nil end
  -- Namespace paths name namespaces on the login node; a user namespace is required.
  linux.namespaces = linux.namespaces or slurm.json_array()
  local have_user_ns = false
  for _, ns in ipairs(linux.namespaces) do
    ns.path = nil
    if ns.type == "user" then have_user_ns = true end
  end
  if not have_user_ns then
    table.insert(linux.namespaces, slurm.json_object({ type = "user" }))
  end
  -- The container's user is the job user outside, nobody else is mapped.
  linux.uidMappings = slurm.json_array({ slurm.json_object({
    containerID = user.uid or 0, hostID = math.floor(user_id), size = 1 }) })
  linux.gidMappings = slurm.json_array({ slurm.json_object({
    containerID = user.gid or 0, hostID = math.floor(group_id), size = 1 }) })

  if config.hooks then config.hooks.prestart = nil end

  local kept, copies = slurm.json_array(), {}
  for _, mount in ipairs(config.mounts or {}) do
    local is_bind = mount.type == "bind"
    if mount.options then
      local options = slurm.json_array()
      for _, option in ipairs(mount.options) do
        if option == "bind" or option == "rbind" then is_bind = true end
        if type(option) ~= "string"
            or not (option:find("^uid=") or option:find("^gid=")) then
          table.insert(options, option)
        end
      end
      mount.options = options
    end
    local source, destination = mount.source, mount.destination
    if is_bind and destination == "/dev/shm" then
      -- podman 5 binds a tmpfs of its own there: the node gives the container a new one
      mount = slurm.json_object({ destination = "/dev/shm", type = "tmpfs", source = "shm",
        options = slurm.json_array({ "nosuid", "noexec", "nodev", "mode=1777" }) })
      is_bind = false
    end
    if is_bind and type(source) == "string" and source:sub(1, 1) == "/"
        and type(destination) == "string" and destination:sub(1, 1) == "/"
        and not is_node_local(source) then
      table.insert(copies, { source = source, destination = destination })
    else
      table.insert(kept, mount)
    end
  end
  config.mounts = kept
  return copies
end

-- Copy bind-mount sources to their destinations inside the staged rootfs, in one shell,
-- refusing destinations that symlinks in the image would lead out of the rootfs.
local function copy_into_rootfs(copies, staged_root)
  -- The copy keeps the image's modes, and the job user is not root: a read-only directory
  -- on the way (podman 5 makes the rootfs itself 0555) is lent u+w for the copy only.
  local script = { COPY_FUNCTIONS, "set -e", LEND_FUNCTIONS }
  for _, copy in ipairs(copies) do
    local source = q(copy.source)
    table.insert(script, "d=$(realpath -m -- " .. q(staged_root .. copy.destination) .. ")")
    table.insert(script, format('case "$d" in %s|%s/*) ;; *) echo "destination leaves the '
                                .. 'rootfs: $d" >&2; exit 1;; esac', q(staged_root), q(staged_root)))
    table.insert(script, format('p=${d%%/*}; a=$p; while [ ! -e "$a" ]; do a=${a%%/*}; done; '
                                .. 'lend_w "$a"; '
                                .. 'if [ -d %s ]; then mkdir -p -- "$d"; copy_dir %s "$d"; '
                                .. 'else mkdir -p -- "$p"; lend_w "$p"; copy_file %s "$d"; fi; '
                                .. 'give_back_w', source, source, source))
  end
  return sh(table.concat(script, "\n"), nil, "copying bind-mount sources into the rootfs")
end

function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id,
                              group_id, job_env)
  local base, staging, staged_root = paths(id, user_id)
  local text, err = read_file(config_file)
  if not text then
    slurm.log_error("scrun-staging: cannot read %s: %s", config_file, tostring(err))
    return slurm.FAILURE
  end
  local config = slurm.from_json(text)
  local source_root = (config.root and config.root.path) or "rootfs"
  if source_root:sub(1, 1) ~= "/" then source_root = bundle .. "/" .. source_root end

  slurm.log_info("scrun-staging: copying %s to %s", source_root, staged_root)
  local prepare = table.concat({
    "umask 077",
    "mkdir -p -- " .. q(base),
    format('if [ -L %s ] || [ ! -O %s ]; then echo "%s is not a directory owned by '
           .. 'uid $(id -u)" >&2; exit 1; fi', q(base), q(base), base),
    "chmod -R u+rwX -- " .. q(staging) .. " 2>/dev/null || true",
    "rm -rf -- " .. q(staging),
    "mkdir -p -- " .. q(staged_root),
  }, "\n")
  -- staged_root is new and empty: nothing for --delete to do
  local ok = sh(prepare, nil, "preparing " .. staging)
    and sh(format("%s\ncopy_dir %s %s", COPY_FUNCTIONS, q(source_root), q(staged_root)),
           nil, "copying " .. source_root)
  local excludes = {}
  if ok then
    local copies = rewrite_config(config, staged_root, user_id, group_id, job_env)
    for _, copy in ipairs(copies) do table.insert(excludes, copy.destination) end
    if #copies > 0 then ok = copy_into_rootfs(copies, staged_root) end
  end
  if ok then
    table.insert(excludes, "")
    ok = write_file(staging .. "/rootfs-excludes", table.concat(excludes, "\n"))
      and write_file(staging .. "/config.json", slurm.to_json(config, true) .. "\n")
  end
  if not ok then
    slurm.log_error("scrun-staging: staging %s failed", id)
    remove(staging)
    return slurm.FAILURE
  end

  slurm.set_bundle_path(staging)
  slurm.set_root_path(staged_root)
  return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path,
                               spool_dir, config_file, job_id, user_id, group_id)
  local _, staging, staged_root = paths(id, user_id)
  if root_path ~= staged_root then
    slurm.log_debug("scrun-staging: %s was not staged", id)
    return slurm.SUCCESS
  end
  if SYNC_BACK then
    slurm.log_info("scrun-staging: copying %s back to %s", staged_root, orig_root_path)
    local back = format("%s --exclude-from=%s %s %s", RSYNC, q(staging .. "/rootfs-excludes"),
                        q(staged_root .. "/"), q(orig_root_path .. "/"))
    if not sh(back, RSYNC_OK) then
      slurm.log_error("scrun-staging: keeping %s because the copy back failed", staging)
      return slurm.FAILURE
    end
  end
  if not remove(staging) then return slurm.FAILURE end
  return slurm.SUCCESS
end

return slurm.SUCCESS
