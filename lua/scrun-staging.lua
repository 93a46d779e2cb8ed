--[[
scrun-staging.lua: a scrun.lua for clusters where the compute nodes cannot see the
container storage of the login node (docker/podman keep the rootfs in a local directory).

stage_in copies the rootfs to STAGING_BASE/<container id>/rootfs, writes a config.json
next to it that rootless crun can run as the job user, and points scrun-py at the copy.
stage_out copies the changed rootfs back and removes the copy.

With CACHE, the rootfs is copied once per content into CACHE_BASE and each container gets
overlay mounts of that copy with uppers of its own instead of a copy; in a job of several
tasks each task has its uppers in a tmpfs of its own (TASK_UPPERS; docs/staging.md).

Install it as scrun.lua next to slurm.conf (or point SCRUN_PY_LUA at it).  Needs rsync,
cp, realpath, chmod, id, du, sha256sum, sort (coreutils), find (findutils), flock and
unshare (util-linux) and a POSIX shell.  See docs/hooks.md.
]]

---------------------------------------------------------------------------- settings
-- Where the copies go; "%u" becomes the job user's uid.  Every node of the job must see
-- it at the same path: at a site, a directory of the shared scratch filesystem, such as
-- "/shared/scratch/%u/scrun-staging".  The default, on this machine's own /tmp, is right
-- only for a job that runs on this machine alone (a one-machine cluster): for any other
-- job stage_in refuses it (see MACHINE_LOCAL), and so an unset ("") base.
local STAGING_BASE = "/tmp/scrun-staging-%u"
-- Copy the rootfs back to the original after the container ends (keeps its changes).
local SYNC_BACK = true
-- Append the job's environment ("NAME=value" strings) to process.env.
local ADD_JOB_ENV = false
-- Bind mounts whose source is under one of these are kept: they exist on every node.
local NODE_LOCAL = { "/dev", "/proc", "/sys" }
-- Directories every node sees at the same path (the site's /home, /scratch, /projects).
-- A bind mount (a volume) whose source, symlinks and ".." resolved, is under one of them
-- stays a bind mount of that resolved path: the container reads and writes the user's
-- own files, nothing is copied.  Every other source is copied into the staged rootfs
-- (what the user cannot read is left out, with a warning), and a writable one is copied
-- back after the container ends (COPY_BACK_VOLUMES).
local SHARED_PATHS = {}
-- Copy a writable copied volume's new and changed files back to its source after the
-- container ends (files it removed stay); false: its changes are dropped.
local COPY_BACK_VOLUMES = true
-- Bind mounts the engine makes for every container: copied, never copied back.
local ENGINE_MOUNTS = { "/etc/hosts", "/etc/hostname", "/etc/resolv.conf",
                        "/run/.containerenv", "/.containerenv", "/run/secrets",
                        "/etc/passwd", "/etc/group" }
-- rsync exit codes that still mean "copied": 24 is "some source files vanished".
local RSYNC = "rsync --archive --numeric-ids --delete"
local RSYNC_OK = { [0] = true, [24] = true }
-- Makes the copy RSYNC makes (no hard links, xattrs or SELinux labels: RSYNC has no -H,
-- -X; only POSIX ACLs, rare in images, are kept where RSYNC has no -A) in one process
-- instead of rsync's three and their protocol: about half the time for a rootfs, a
-- twentieth for a single file.  Used only where RSYNC's --delete would have nothing to
-- delete; if it fails, RSYNC does the copy and its status counts.  --reflink=auto: on a
-- filesystem with reflinks (btrfs, xfs, bcachefs) the copy shares the source's blocks.
local CP = "cp -a --reflink=auto --no-preserve=links,xattr,context"
-- Keep one copy per rootfs content in CACHE_BASE ("%u" as above) and give each container
-- overlay mounts of it (lower: the cached copy, upper: STAGING_BASE/<id>/upper) instead
-- of a copy of its own.  Where overlayfs cannot be mounted, the rootfs is copied.
-- STAGING_BASE must then be on a filesystem overlayfs accepts as upper (not NFS), seen by
-- the node at the same path; CACHE_BASE may be on a shared filesystem (docs/staging.md).
local CACHE = true
local CACHE_BASE = "/tmp/scrun-cache-%u"
-- The tasks of a job share one config.json, so they cannot share uppers on the scratch:
-- with TASK_UPPERS, a job of several tasks uses the cache too, each task's uppers in a
-- tmpfs of its own on its node (the runtime's tmpcopyup; Linux 6.6 or later, for
-- overlayfs' attributes on tmpfs).  A task's writes to the image's directories are then
-- its own, count against its node's memory and do not come back at stage_out.  false:
-- such a job copies the rootfs, which all its tasks share, and SYNC_BACK copies it back.
local TASK_UPPERS = true
-- Directories of this machine's own disk or memory: a STAGING_BASE or CACHE_BASE under
-- one of them is refused for a job whose nodes are not this machine alone
-- (SLURM_JOB_NODELIST of the job other than this machine's short hostname).
local MACHINE_LOCAL = { "/tmp", "/var/tmp", "/dev/shm", "/run" }
-- Size bound of the user's cache; the least recently used entries no container uses
-- are removed beyond it.
local CACHE_MAX_MB = 4096
-- "metadata": the key covers every entry's path, type, mode, owner, size, mtime and link
-- target (rsync's quick check); "content": also the bytes of every regular file
-- (sha256, read on every stage_in); "auto": "content" where the cache is shared by every
-- caller (jobs of uid 0: root dockerd and root podman run every user's containers as
-- root, so one image author could plant an entry another user's image is served from),
-- "metadata" in a user's own cache.
local CACHE_KEY = "auto"
------------------------------------------------------------------------------------
-- The settings above are defaults: scrun-py hands the script the [staging] table of
-- scrun-py.toml as slurm.staging_settings, and a key set there is used instead, so a site
-- keeps its settings in its own file when it installs a newer script.  Under Slurm's own
-- scrun, which has no such table, the settings above hold.
do
  local site = type(slurm.staging_settings) == "table" and slurm.staging_settings or {}
  local function setting(key, default)
    if site[key] == nil then return default end
    return site[key]
  end
  STAGING_BASE = setting("base", STAGING_BASE)
  SYNC_BACK = setting("sync_back", SYNC_BACK)
  SHARED_PATHS = setting("shared_paths", SHARED_PATHS)
  CACHE = setting("cache", CACHE)
  CACHE_BASE = setting("cache_base", CACHE_BASE)
  TASK_UPPERS = setting("task_uppers", TASK_UPPERS)
  CACHE_MAX_MB = setting("cache_max_mb", CACHE_MAX_MB)
  CACHE_KEY = setting("cache_key", CACHE_KEY)
end

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

-- Is PATH one of DIRS or under one of them?
local function under(path, dirs)
  for _, dir in ipairs(dirs) do
    if path == dir or path:sub(1, #dir + 1) == dir .. "/" then return true end
  end
  return false
end

-- Is MOUNT a bind mount of an absolute source to an absolute destination?
local function is_bind_mount(mount)
  local is_bind = mount.type == "bind"
  for _, option in ipairs(mount.options or {}) do
    if option == "bind" or option == "rbind" then is_bind = true end
  end
  return is_bind and type(mount.source) == "string" and mount.source:sub(1, 1) == "/"
    and type(mount.destination) == "string" and mount.destination:sub(1, 1) == "/"
end

local function has_option(mount, wanted)
  for _, option in ipairs(mount.options or {}) do
    if option == wanted then return true end
  end
  return false
end

-- The bind-mount sources of config.json that are under SHARED_PATHS once resolved
-- (realpath: symlinks and ".." followed, as the kernel will): { [source] = resolved }.
-- The resolved path is what the node mounts, so what was checked is what is mounted.
local function shared_sources(config)
  local shared = {}
  if #SHARED_PATHS == 0 then return shared end
  local sources, args = {}, {}
  for _, path in ipairs(SHARED_PATHS) do table.insert(args, q(path)) end
  for _, mount in ipairs(config.mounts or {}) do
    if is_bind_mount(mount) and not is_node_local(mount.source)
        and mount.destination ~= "/dev/shm" then
      table.insert(sources, mount.source)
      table.insert(args, q(mount.source))
    end
  end
  if #sources == 0 then return shared end
  -- one NUL-terminated field per path: its resolved path, empty if it does not exist
  local status, output = slurm.allocator_command(
    'for p in ' .. table.concat(args, " ") .. '; do realpath -ez -- "$p" 2>/dev/null '
    .. "|| printf '\\0'; done")
  if status ~= 0 then return shared end
  local resolved, pos = {}, 1
  while true do
    local nul = output:find("\0", pos, true)
    if not nul then break end
    table.insert(resolved, output:sub(pos, nul - 1))
    pos = nul + 1
  end
  local bases = {}
  for i = 1, #SHARED_PATHS do
    if resolved[i] and resolved[i] ~= "" and resolved[i] ~= "/" then
      table.insert(bases, resolved[i])
    end
  end
  for i, source in ipairs(sources) do
    local path = resolved[#SHARED_PATHS + i]
    if path and path ~= "" and under(path, bases) then shared[source] = path end
  end
  return shared
end

-- Make config.json runnable by rootless crun as the job user on a compute node.
-- Returns the bind mounts whose sources must be copied into the rootfs: { source,
-- destination, readonly }; a bind mount whose source SHARED (shared_sources) resolves
-- stays one, of the resolved path.
local function rewrite_config(config, staged_root, user_id, group_id, job_env, shared)
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
    if is_bind and shared and shared[source] then
      mount.source = shared[source]
      table.insert(kept, mount)
    elseif is_bind and type(source) == "string" and source:sub(1, 1) == "/"
        and type(destination) == "string" and destination:sub(1, 1) == "/"
        and not is_node_local(source) then
      table.insert(copies, { source = source, destination = destination,
                             readonly = has_option(mount, "ro") })
    else
      table.insert(kept, mount)
    end
  end
  config.mounts = kept
  return copies
end

-- copy_volume SRC DEST: DEST becomes a copy of SRC (a directory or a file: modes, times,
-- symlinks; owners and devices only for a job of root's, OWN).  What the user cannot
-- read (and a directory it cannot search) is left out: "skipped=N SRC: first names" on
-- stdout.  back_to SRC DEST: SRC's new and changed files copied back from DEST.
local VOLUME_FUNCTIONS = table.concat({
  -- rsync without --archive: owners are not set (but as root: OWN), nothing is deleted
  'vol_rsync() { rsync "$@" || { _s=$?; [ "$_s" = 24 ] || return $_s; }; }',
  'skipped() { _n=$(wc -l < "$2"); [ "$_n" = 0 ] || printf "skipped=%s %s: %s\\n" "$_n" "$1" '
    .. '"$(head -n 3 -- "$2" | tr "\\n" " ")"; }',
  'copy_volume() { if [ -e "$2" ] || [ -L "$2" ]; then chmod -R u+rwX -- "$2" 2>/dev/null; '
    .. 'rm -rf -- "$2" || return 1; fi',
  '  if [ -d "$1" ]; then mkdir -p -- "$2" || return 1',
  '    if [ ! -r "$1" ] || [ ! -x "$1" ]; then printf "skipped=1 %s: .\\n" "$1"; return 0; fi',
  '    _sk=$(mktemp) || return 1',
  -- (not "." itself: rsync would create every name in it; its mode and mtime come last)
  [[    (cd -- "$1" && LC_ALL=C find . -mindepth 1 ! -type l ]]
    .. [[\( ! -readable -o -type d ! -executable \) -fprintf "$_sk" '%P\n' -prune ]]
    .. [[-o -printf '%P\0') 2>"$_sk.e" ]]
    .. '| vol_rsync -lpt $OWN --numeric-ids --files-from=- --from0 -- "$1/" "$2/"; _s=$?',
  -- (a directory access(2) calls searchable that cannot be opened, in a user namespace
  -- of an engine: find's message names it, and its empty copy is removed)
  '    LC_ALL=C sed -n "s|^find: .\\./\\(.*\\).: Permission denied$|\\1|p" "$_sk.e" > "$_sk.d"',
  '    while IFS= read -r _p; do rm -rf -- "$2/$_p"; done < "$_sk.d"; cat -- "$_sk.d" >> "$_sk"',
  '    rm -f -- "$_sk.d"',
  '    chmod --reference="$1" -- "$2" && touch -r "$1" -- "$2" || _s=1',
  '    skipped "$1" "$_sk"; rm -f -- "$_sk" "$_sk.e"; return $_s',
  '  elif [ -r "$1" ]; then vol_rsync -Lpt $OWN -- "$1" "$2"',
  '  else printf "skipped=1 %s: .\\n" "$1"; fi; }',
  -- (one "back=NAME" line per file copied back.  --checksum: rsync compares mtimes to the
  -- second, and a file the container rewrote in the second the copy was made, same size,
  -- must not be taken for unchanged; --update: a file changed at the source meanwhile,
  -- newer than the copy, is kept)
  'back_to() { if [ -d "$2" ]; then vol_rsync -rlptuc --omit-dir-times --numeric-ids $OWN '
    .. '--out-format="back=%n" -- "$2/" "$1/"; elif [ -f "$2" ]; then '
    .. 'vol_rsync -lptuc $OWN --out-format="back=%n" -- "$2" "$1"; fi; }',
}, "\n")

local function volume_own(user_id)
  return "OWN=" .. (math.floor(user_id) == 0 and "'-go -D'" or "--specials")
end

-- Copy bind-mount sources to their destinations inside the staged rootfs, in one shell,
-- refusing destinations that symlinks in the image would lead out of the rootfs.
local function copy_script(copies, staged_root, user_id)
  -- The copy keeps the image's modes, and the job user is not root: a read-only directory
  -- on the way (podman 5 makes the rootfs itself 0555) is lent u+w for the copy only.
  local script = { COPY_FUNCTIONS, VOLUME_FUNCTIONS, volume_own(user_id), "set -e",
                   LEND_FUNCTIONS }
  for _, copy in ipairs(copies) do
    local source = q(copy.source)
    table.insert(script, "d=$(realpath -m -- " .. q(staged_root .. copy.destination) .. ")")
    table.insert(script, format('case "$d" in %s|%s/*) ;; *) echo "destination leaves the '
                                .. 'rootfs: $d" >&2; exit 1;; esac', q(staged_root), q(staged_root)))
    table.insert(script, format('p=${d%%/*}; a=$p; while [ ! -e "$a" ]; do a=${a%%/*}; done; '
                                .. 'lend_w "$a"; '
                                .. 'if [ -d %s ]; then mkdir -p -- "$d"; else mkdir -p -- "$p"; '
                                .. 'lend_w "$p"; fi; copy_volume %s "$d"; give_back_w',
                                source, source))
  end
  return table.concat(script, "\n")
end

local function is_engine_mount(destination)
  for _, path in ipairs(ENGINE_MOUNTS) do
    if destination == path then return true end
  end
  return false
end

-- The script stage_out runs to copy the writable volumes back (nil: none to copy back)
local function copy_back_script(copies, staged_root, user_id)
  local lines = {}
  for _, copy in ipairs(copies) do
    local destination = copy.destination:gsub("/+$", "")
    if COPY_BACK_VOLUMES and not copy.readonly and not is_engine_mount(destination) then
      table.insert(lines, format("back_to %s %s || failed=1", q(copy.source),
                                 q(staged_root .. destination)))
    end
  end
  if #lines == 0 then return nil end
  return table.concat({ COPY_FUNCTIONS, VOLUME_FUNCTIONS, volume_own(user_id), "failed=",
                        table.concat(lines, "\n"), '[ -z "$failed" ]' }, "\n") .. "\n"
end

-- Run a copy of bind-mount sources (its shell text), logging what it left out
local function run_copies(id, text)
  local status, output = slurm.allocator_command(text)
  output = output or ""
  for count, source, names in output:gmatch("skipped=(%d+) ([^\n]-): ([^\n]*)") do
    slurm.log_user(format("scrun-staging: %s: %s entries of %s cannot be read by the job's "
                          .. "user and are not in the container (%s)", id, count, source,
                          (names:gsub("%s+$", ""))))
  end
  if status ~= 0 then
    slurm.log_error("scrun-staging: copying bind-mount sources into the rootfs failed with "
                    .. "status %s: %s", tostring(status), (output:gsub("%s+$", "")))
    return false
  end
  return true
end

local function copy_into_rootfs(id, copies, staged_root, user_id)
  return run_copies(id, copy_script(copies, staged_root, user_id))
end

---------------------------------------------------------------------------- the cache
-- Files the engines make in every container's rootfs: not part of the key.
local ENGINE_FILES = { "/.dockerenv", "/run/.containerenv" }

-- Shell functions of the cached stage-in; they use S (the staging dir), C (the cache
-- base), ID (the container id) and JOB (its job id).
local CACHE_FUNCTIONS = table.concat({
  'remove_dir() { chmod -R u+rwX -- "$1" 2>/dev/null || true; rm -rf -- "$1"; }',
  -- a private mount namespace (and, not as root, a user namespace) for overlay mounts
  'in_ns() { if [ "$(id -u)" = 0 ]; then unshare -m -- "$@"; else unshare -Urm -- "$@"; fi; }',
  -- what the container may change: the uppers and the skeleton (the work dirs are overlayfs')
  [[snap() { find "$S/upper" "$S/rootfs" -printf '%p\t%y\t%m\t%U\t%G\t%s\t%T@\t%l\n' ]]
    .. "| sha256sum; }",
  -- a job squeue no longer knows, or knows as ended, cannot be using an entry
  'job_live() { _o=$(squeue -h -j "$1" -o %T 2>&1) && case "$_o" in '
    .. '""|BOOT_FAIL|CANCELLED|COMPLETED|DEADLINE|FAILED|NODE_FAIL|OUT_OF_MEMORY|PREEMPTED|'
    .. 'TIMEOUT) '
    .. 'return 1;; esac; case "$_o" in *"Invalid job id"*) return 1;; esac; return 0; }',
  'in_use() { for _u in "$1"/users/*; do [ -f "$_u" ] || continue; '
    .. 'if job_live "$(cat -- "$_u")"; then return 0; fi; rm -f -- "$_u"; done; return 1; }',
  -- register ENTRY: this container uses it (with the lock held)
  'register() { mkdir -p -- "$1/users" && printf "%s\\n" "$JOB" > "$1/users/$ID" '
    .. '&& touch -- "$1/used" && echo $(( $(cat -- "$1/uses" 2>/dev/null || echo 0) + 1 )) '
    .. '> "$1/uses"; }',
  -- evict MAX_KB: least recently used entries no live container uses (nor $KEEP, the
  -- entry of a stage_in) go to the trash until the entries fit (with the lock held)
  'evict() { _t=$(cat -- "$C"/entries/*/size 2>/dev/null | { _t=0; while read -r _n; do '
    .. '_t=$((_t + _n)); done; echo "$_t"; }); [ "$_t" -gt "$1" ] || return 0; '
    .. [[for _e in $(find "$C/entries" -mindepth 2 -maxdepth 2 -name used -printf '%T@ %h\n' ]]
    .. '| sort -n | cut -d" " -f2-); do [ "$_t" -gt "$1" ] || break; '
    .. '[ "$_e" != "${KEEP:-}" ] || continue; in_use "$_e" && continue; '
    .. '_t=$((_t - $(cat -- "$_e/size" 2>/dev/null || echo 0))); '
    .. 'mv -- "$_e" "$C/trash/${_e##*/}.$ID.$$" && echo "evicted ${_e##*/}"; done; }',
  -- empty_trash: what this shell put there, and what crashed stage_ins left (a day old)
  'empty_trash() { for _e in "$C"/trash/*."$ID".$$ $(find "$C/trash" "$C/tmp" "$C/known" -mindepth 1 '
    .. '-maxdepth 1 -mmin +1440 2>/dev/null); do [ -e "$_e" ] && remove_dir "$_e"; done; '
    .. 'return 0; }',
  -- ref FROM TO: TO gets FROM's owner (as root), mode and mtime
  'ref() { { [ "$(id -u)" != 0 ] || chown --reference="$1" -- "$2"; } '
    .. '&& chmod --reference="$1" -- "$2" && touch -r "$1" -- "$2"; }',
}, "\n")

-- DIR must be a directory of this user's that nobody else can write (another user may
-- have made it first in a shared /tmp)
local function owned_dir(dir)
  return table.concat({
    "mkdir -p -- " .. q(dir),
    format('if [ -L %s ] || [ ! -O %s ]; then echo "%s is not a directory owned by '
           .. 'uid $(id -u)" >&2; exit 1; fi', q(dir), q(dir), dir),
    format('if [ -n "$(find %s -maxdepth 0 -perm /022)" ]; then echo "%s is writable by '
           .. 'other users" >&2; exit 1; fi', q(dir), dir),
  }, "\n")
end

-- "/a//b/" -> "/a/b"; nil for "/" and relative paths
local function clean_destination(path)
  if type(path) ~= "string" or path:sub(1, 1) ~= "/" then return nil end
  path = path:gsub("/+", "/"):gsub("/$", "")
  if path == "" then return nil end
  return path
end

-- The find(1) expression that leaves out PATHS (absolute, in the rootfs) and what is
-- under them.
local function prune_args(paths_in_rootfs)
  local args = {}
  for _, path in ipairs(paths_in_rootfs) do
    table.insert(args, (#args == 0 and "" or "-o ") .. "-path "
                 .. q("." .. path:gsub("[%*%?%[%]\\]", "\\%0")))
  end
  if #args == 0 then return "" end
  return "\\( " .. table.concat(args, " ") .. " \\) -prune -o "
end

-- The shell commands that print the key of the rootfs in $SRC (the engine's, not
-- counting PATHS): a digest of every entry's path, type, mode, owner, size, mtime and
-- link target; directories without size and mtime, symlinks without mode and mtime
-- ("content": and every regular file's sha256).
local function key_commands(paths_in_rootfs, key_kind)
  local prune = prune_args(paths_in_rootfs)
  local lines = {
    'cd -- "$SRC"',
    "find . " .. prune .. [[\( -type d -printf '%p\td\t%m\t%U\t%G\0' \) ]]
      .. [[-o \( -type l -printf '%p\tl\t%U\t%G\t%l\0' \) ]]
      .. [[-o -printf '%p\t%y\t%m\t%U\t%G\t%s\t%T@\0' > "$S/key-list"]],
    'LC_ALL=C sort -z -o "$S/key-list" "$S/key-list"',
  }
  local digest = format([[$({ printf 'scrun-staging 1 %%s\0' %s; cat -- "$S/key-list"; } ]]
                        .. "| sha256sum | cut -c1-64)", q(key_kind))
  if key_kind == "content" then
    -- Reading every file is as long as a copy for a large image.  The files' inode numbers
    -- and change times, which no image author can choose (the kernel sets them when the
    -- engine writes the file), name the same bytes as long as no file was written or made
    -- again: the content key of such a listing is remembered in $C/known/ and read back.
    table.insert(lines, "find . " .. prune .. [[-type f -printf '%p\t%i\t%C@\0' ]]
                 .. '| LC_ALL=C sort -z | cat -- "$S/key-list" - | sha256sum '
                 .. '| cut -c1-64 > "$S/key-known"')
    -- Containers of one new image started at once read it once: the others wait for the
    -- lock of $K.lock and then find the key.
    -- A rootfs whose listing (paths, modes, owners, sizes, mtimes: $L) no entry was made
    -- from cannot have the key of any entry: it is copied into the cache ($P) while its
    -- files are read for the key, and the one who reads takes the entry's lock ($M, fd 8)
    -- before the others find the key.
    table.insert(lines, 'mkdir -p -- "$C/known" "$C/tmp"')
    table.insert(lines, 'K=$C/known/$(cat -- "$S/key-known")')
    table.insert(lines, table.concat({
      'known() { key=$(cat -- "$K" 2>/dev/null) && [ ${#key} = 64 ]; }',
      'if known; then touch -- "$K"; else',
      '  exec 7>>"$K.lock" && flock 7 && { known || {',
      '  L=$(sha256sum < "$S/key-list" | cut -c1-64) || exit 1',
      '  _cp=""',
      '  if ! grep -qsxF -- "$L" "$C"/entries/*/listing; then',
      '    remove_dir "$P"; mkdir -p -- "$P/rootfs" || exit 1',
      '    { copy_dir "$SRC" "$P/rootfs" && touch -- "$P/done"; } </dev/null >/dev/null 2>&1 &',
      '    _cp=$!',
      '  fi',
      "  find . " .. prune .. '-type f -print0 | LC_ALL=C sort -z '
        .. '| xargs -0 -r sha256sum -- >> "$S/key-list" &&',
      "  key=" .. digest .. " &&",
      '  { [ -z "$_cp" ] || { exec 8>>"$C/tmp/$key.making" && flock 8 && _m=1; }; } &&',
      '  printf "%s\n" "$key" > "$K.$$" && mv -f -- "$K.$$" "$K"; _r=$?; '
        .. '[ -z "$_cp" ] || wait "$_cp"; [ "$_r" = 0 ]; }; }',
      '  _r=$?; rm -f -- "$K.lock"; exec 7>&-; [ "$_r" = 0 ]',
      'fi',
    }, "\n"))
  else
    table.insert(lines, "key=" .. digest)
  end
  table.insert(lines, 'rm -f -- "$S/key-list" "$S/key-known"; cd /')
  return table.concat(lines, " &&\n")
end

-- SLURM_TASKS_PER_NODE of the job ("1": one task on one node)
local function tasks_per_node(job_env)
  for _, entry in ipairs(job_env or {}) do
    local value = type(entry) == "string" and entry:match("^SLURM_TASKS_PER_NODE=(.*)$")
    if value then return value end
  end
  return "unknown"
end

-- UPPERS: the directory whose upper/<dir> and work/<dir> the overlays use
local function overlay_mounts(entry, uppers, dirs, readonly)
  local mounts = slurm.json_array()
  for _, dir in ipairs(dirs) do
    local options = slurm.json_array({ "userxattr",
      "lowerdir=" .. entry .. "/rootfs/" .. dir, "upperdir=" .. uppers .. "/upper/" .. dir,
      "workdir=" .. uppers .. "/work/" .. dir })
    if readonly then table.insert(options, "ro") end
    table.insert(mounts, slurm.json_object({ destination = "/" .. dir, type = "overlay",
                                             source = "overlay", options = options }))
  end
  return mounts
end

-- A job of several tasks (TASK_UPPERS): the uppers are made in this directory of the
-- skeleton, and each task's runtime mounts a tmpfs there first that starts as a copy of
-- them (tmpcopyup), then the overlays, then an empty read-only tmpfs over it, which hides
-- it from the container.
local TASK_UPPERS_DIR = ".scrun-uppers"

local function task_uppers_mounts()
  local function tmpfs(options)
    return slurm.json_object({ destination = "/" .. TASK_UPPERS_DIR, type = "tmpfs",
                               source = "tmpfs", options = slurm.json_array(options) })
  end
  return tmpfs({ "tmpcopyup", "nosuid", "nodev", "mode=700" }),
         tmpfs({ "ro", "nosuid", "nodev", "noexec", "mode=000", "size=4k" })
end

-- The overlays mounted again at stage_in and stage_out (read-write: a read-only rootfs
-- is the container's view only).
local function overlays_script(mounts, staged_root)
  local lines = { "set -e" }
  for _, mount in ipairs(mounts) do
    local options = {}
    for _, option in ipairs(mount.options) do
      if option ~= "ro" then table.insert(options, option) end
    end
    table.insert(lines, format("mount -t overlay overlay -o %s %s",
                               q(table.concat(options, ",")),
                               q(staged_root .. mount.destination)))
  end
  return table.concat(lines, "\n") .. "\n"
end

-- Overlay options are comma-separated and lowerdir colon-separated.
local function overlay_safe(path)
  return not path:find("[^%w/%._%-+@]")
end

-- The key's kind for a job of USER_ID (CACHE_KEY "auto": "content" in a shared cache)
local function key_kind(user_id)
  if CACHE_KEY ~= "auto" then return CACHE_KEY end
  return math.floor(user_id) == 0 and "content" or "metadata"
end

-- $P: where a rootfs is copied while it is read for its key (key_commands)
local function cache_vars(staging, cache, id, job_id)
  return format("S=%s\nC=%s\nID=%s\nJOB=%s\nP=$C/tmp/pending.$ID\n", q(staging), q(cache),
                q(id), q(math.floor(job_id)))
end

local function max_kb()
  return math.floor(CACHE_MAX_MB * 1024)
end

-- stage_in from the cache; nil (after one log line and cleaning up) where the rootfs
-- has to be copied instead.
local function stage_in_cached(id, text, source_root, job_id, user_id, group_id, job_env)
  local base, staging, staged_root = paths(id, user_id)
  local cache = (CACHE_BASE:gsub("%%u", tostring(math.floor(user_id))))
  local tasks = tasks_per_node(job_env)
  local task_uppers = tasks ~= "1"
  if tasks == "unknown" then
    slurm.log_info("scrun-staging: %s: the job's environment has no SLURM_TASKS_PER_NODE: "
                   .. "copying the rootfs", id)
    return nil
  end
  if task_uppers and not TASK_UPPERS then
    -- the tasks of a job share one config.json: they would share the uppers
    slurm.log_info("scrun-staging: %s: not one task (SLURM_TASKS_PER_NODE=%s) and "
                   .. "TASK_UPPERS is false: copying the rootfs", id, tasks)
    return nil
  end
  if not (overlay_safe(staging) and overlay_safe(cache)) then
    slurm.log_info("scrun-staging: %s: %s or %s cannot be named in overlay options: copying "
                   .. "the rootfs", id, staging, cache)
    return nil
  end
  local config = slurm.from_json(text)
  local copies = rewrite_config(config, staged_root, user_id, group_id, job_env,
                                shared_sources(config))
  -- mount destinations: the engine makes them per container, and the container sees
  -- its mounts there, not the rootfs
  local excluded = {}
  local function exclude(path)
    path = clean_destination(path)
    if path then table.insert(excluded, path) end
  end
  for _, path in ipairs(ENGINE_FILES) do exclude(path) end
  for _, mount in ipairs(config.mounts or {}) do exclude(mount.destination) end
  for _, copy in ipairs(copies) do exclude(copy.destination) end

  local script = table.concat({
    "umask 077", COPY_FUNCTIONS, CACHE_FUNCTIONS, cache_vars(staging, cache, id, job_id),
    "SRC=" .. q(source_root),
    task_uppers and ("TU=" .. q(TASK_UPPERS_DIR) .. '; UP=$S/rootfs/$TU/upper; '
                     .. 'WK=$S/rootfs/$TU/work')
      or 'TU=; UP=$S/upper; WK=$S/work',
    "set -e", owned_dir(base), owned_dir(cache),
    'remove_dir "$S"',
    'mkdir -p -- "$S/rootfs" "$S/upper" "$UP" "$WK" "$S/probe/l" "$S/probe/u" "$S/probe/w" '
      .. '"$S/probe/m" "$S/probe/t"',
    "set +e",
    -- can this user mount an overlay with its upper here (and, for several tasks, with
    -- its upper in a tmpfs)?
    'in_ns mount -t overlay overlay -o "userxattr,lowerdir=$S/probe/l,upperdir=$S/probe/u,'
      .. 'workdir=$S/probe/w" "$S/probe/m" || exit 3',
    '[ -z "$TU" ] || in_ns /bin/sh -c \'mount -t tmpfs tmpfs "$1/t" && mkdir "$1/t/u" "$1/t/w" '
      .. '&& mount -t overlay overlay -o "userxattr,lowerdir=$1/l,upperdir=$1/t/u,'
      .. 'workdir=$1/t/w" "$1/m"\' sh "$S/probe" || exit 8',
    'remove_dir "$S/probe"',
    "{ " .. key_commands(excluded, key_kind(user_id)) .. "; } || exit 4",
    'echo "key=$key"',
    'E=$C/entries/$key; T=$C/tmp/$key.$ID',
    'mkdir -p -- "$C/entries" "$C/tmp" "$C/trash" || exit 1',
    -- an entry with fewer files than it was made with lost some (an age-based /tmp
    -- cleaner): made again, unless a container still uses it (checked again under the lock)
    'lost() { [ -d "$E/rootfs" ] && [ "$(find "$E/rootfs" | wc -l)" != '
      .. '"$(cat -- "$E/count" 2>/dev/null)" ]; }',
    'lost && _lost=1',
    'exec 9>>"$C/lock"; flock 9 || exit 1',
    'if [ -n "${_lost:-}" ] && lost; then',
    '  ! in_use "$E" || exit 6',
    '  mv -- "$E" "$C/trash/$key.$ID.$$" || exit 1; echo "evicted $key (incomplete)"',
    'fi',
    '_state=""',
    'if [ -d "$E/rootfs" ]; then register "$E" || exit 1; _state=hit; fi',
    -- one copy per entry: a stage_in that finds another one copying the same rootfs waits
    -- for that copy (the lock of $M, taken without the cache's lock) and uses it
    'M=$C/tmp/$key.making',
    'if [ -z "$_state" ] && [ -z "${_m:-}" ]; then',
    '  flock -u 9; exec 8>>"$M"; flock 8 || exit 1; flock 9 || exit 1',
    '  if [ -d "$E/rootfs" ]; then register "$E" || exit 1; _state=waited; fi',
    'fi',
    'if [ -z "$_state" ]; then',
    '  flock -u 9',
    '  remove_dir "$T"; mkdir -p -- "$T/users" || exit 1',
    -- the copy made while the key was read, or one now
    '  if [ -n "${_cp:-}" ] && [ -f "$P/done" ]; then mv -- "$P/rootfs" "$T/rootfs" || exit 1',
    '    echo "while-read"',
    '  else mkdir -- "$T/rootfs" && copy_dir "$SRC" "$T/rootfs" || { remove_dir "$T"; exit 5; }',
    '  fi',
    '  du -sk -- "$T/rootfs" | cut -f1 > "$T/size" && find "$T/rootfs" | wc -l > "$T/count" '
      .. '&& touch -- "$T/used" || exit 1',
    '  [ -z "${L:-}" ] || printf "%s\n" "$L" > "$T/listing" || exit 1',
    '  flock 9 || exit 1',
    '  if [ -d "$E/rootfs" ]; then _state=lost; else mv -- "$T" "$E" || exit 1; _state=miss; fi',
    '  register "$E" || exit 1',
    'fi',
    -- the entry is there (under the cache's lock): who comes now finds it, not $M
    '{ [ "$_state" = hit ] && [ -z "${_m:-}" ]; } || rm -f -- "$M"',
    'exec 8>&-',
    'echo "$_state"',
    "KEEP=$E; evict " .. max_kb(),
    'exec 9>&-',
    '[ -z "${_cp:-}" ] || { [ ! -d "$P/rootfs" ] || echo "dropped"; remove_dir "$P"; }',
    '[ ! -e "$T" ] || remove_dir "$T"',
    'empty_trash',
    -- the skeleton: the top-level directories are mount points of overlays, the rest
    -- (symlinks such as lib -> usr/lib, files) is copied
    -- (the upper directories get the owner, mode and mtime of the image's: one tar for all)
    'cd -- "$E/rootfs" || exit 1',
    'set --',
    'for _f in * .[!.]* ..?*; do',
    '  [ -e "$_f" ] || [ -L "$_f" ] || continue',
    -- a name overlay options cannot carry (a newline would also forge a "dir=" line)
    '  case "$_f" in *[!A-Za-z0-9._+@-]*) if [ -d "$_f" ] && [ ! -L "$_f" ]; then exit 7; fi;; '
      .. 'esac',
    '  [ "$_f" != "$TU" ] || exit 9',
    '  if [ -d "$_f" ] && [ ! -L "$_f" ]; then set -- "$@" "$_f"; printf "dir=%s\\n" "$_f"',
    '  else ' .. CP .. ' -- "$_f" "$S/rootfs/" || exit 1; fi',
    'done',
    '[ $# = 0 ] || { (cd -- "$S/rootfs" && mkdir -- "$@") && (cd -- "$WK" && mkdir -- "$@") '
      .. '&& tar --no-recursion -cf - -- "$@" | (cd -- "$UP" && tar -xpf -); } || exit 1',
    'cd / && ref "$E/rootfs" "$S/rootfs" || exit 1',
    'snap > "$S/snapshot" || exit 1',
  }, "\n")
  local status, output = slurm.allocator_command(script)
  output = output or ""
  local key = output:match("key=(%x+)")
  local entry = key and (cache .. "/entries/" .. key)
  local function clean_up()
    local undo = { CACHE_FUNCTIONS, cache_vars(staging, cache, id, job_id) }
    if entry then table.insert(undo, "rm -f -- " .. q(entry .. "/users/" .. id)) end
    table.insert(undo, 'remove_dir "$S"; remove_dir "$P"')
    sh(table.concat(undo, "\n"), nil, "cleaning up " .. staging)
  end
  local function give_up(why)
    slurm.log_info("scrun-staging: %s: %s: copying the rootfs", id, why)
    clean_up()
    return nil
  end
  local reasons = { [3] = "overlayfs cannot be mounted here",
                    [4] = "the rootfs cannot be read for its key",
                    [5] = "the copy into the cache failed",
                    [6] = "its cache entry lost files and a container still uses it",
                    [7] = "a top-level directory of the image has a name overlay options "
                          .. "cannot carry",
                    [8] = "overlayfs cannot be mounted here with its upper in a tmpfs, as "
                          .. "each task's is",
                    [9] = "the image has a top-level " .. TASK_UPPERS_DIR .. ", where the "
                          .. "tasks' uppers go" }
  if status ~= 0 then
    return give_up(format("%s (status %s: %s)", reasons[status] or "the cache failed",
                          tostring(status), (output:gsub("%s+$", ""):gsub("\n", "; "))))
  end
  local dirs = {}
  for dir in output:gmatch("dir=([^\n]*)") do
    if not overlay_safe(dir) or dir:find("/") or dir == "." or dir == ".." then
      return give_up("a top-level directory named " .. dir)
    end
    table.insert(dirs, dir)
  end
  for line in output:gmatch("evicted (%x+)") do
    slurm.log_info("scrun-staging: evicted cache entry %s", line)
  end
  local state = output:match("\n(%a+)\n") or "?"
  if output:find("\nwhile%-read\n") then
    slurm.log_info("scrun-staging: %s: the rootfs was copied while it was read for its key",
                   id)
  elseif output:find("\ndropped\n") then
    slurm.log_info("scrun-staging: %s: the copy made while the rootfs was read for its key "
                   .. "is dropped: another container made the entry", id)
  end
  if state == "hit" then
    slurm.log_info("scrun-staging: %s: the rootfs of %s is cached as %s: no copy", id,
                   source_root, entry)
  elseif state == "waited" then
    slurm.log_info("scrun-staging: %s: another container copied %s to the cache as %s "
                   .. "meanwhile: no copy", id, source_root, entry)
  elseif state == "lost" then
    slurm.log_info("scrun-staging: %s: copied %s for the cache, but another container made "
                   .. "%s first: the copy is discarded", id, source_root, entry)
  else
    slurm.log_info("scrun-staging: %s: copied %s to the cache as %s (%s)", id, source_root,
                   entry, state)
  end

  local readonly = config.root and config.root.readonly == true
  local uppers = task_uppers and (staged_root .. "/" .. TASK_UPPERS_DIR) or staging
  local mounts = overlay_mounts(entry, uppers, dirs, readonly)
  local all = slurm.json_array()
  local first, hide = task_uppers_mounts()
  if task_uppers then table.insert(all, first) end
  for _, mount in ipairs(mounts) do table.insert(all, mount) end
  if task_uppers then
    table.insert(all, hide)
    table.insert(excluded, "/" .. TASK_UPPERS_DIR)
    slurm.log_info("scrun-staging: %s: several tasks (SLURM_TASKS_PER_NODE=%s): each task's "
                   .. "uppers are a tmpfs of its own: its writes to the image's directories "
                   .. "stay on its node and do not come back", id, tasks)
  end
  for _, mount in ipairs(config.mounts or {}) do table.insert(all, mount) end
  config.mounts = all

  local ok = write_file(staging .. "/overlays.sh", overlays_script(mounts, staged_root))
  if ok and #copies > 0 then
    -- the copies go into the uppers: through the overlays, in a mount namespace of their own
    ok = write_file(staging .. "/stage-in.sh", ". " .. q(staging .. "/overlays.sh") .. "\n"
                    .. copy_script(copies, staged_root, user_id) .. "\n")
      and run_copies(id, table.concat({ CACHE_FUNCTIONS, cache_vars(staging, cache, id, job_id),
                                        'in_ns /bin/sh "$S/stage-in.sh" && snap > "$S/snapshot"' },
                                      "\n"))
    local back = ok and copy_back_script(copies, staged_root, user_id)
    if back then
      ok = write_file(staging .. "/copy-back.sh", ". " .. q(staging .. "/overlays.sh") .. "\n"
                      .. back)
    end
  end
  if ok then
    table.insert(excluded, "")
    ok = write_file(staging .. "/rootfs-excludes", table.concat(excluded, "\n"))
      and write_file(staging .. "/cache-entry", entry .. "\n")
      and write_file(staging .. "/config.json", slurm.to_json(config, true) .. "\n")
  end
  if not ok then
    -- the bind-mount copies failed (their error is logged): the copy would fail as well
    slurm.log_error("scrun-staging: staging %s failed", id)
    clean_up()
    return slurm.FAILURE
  end
  slurm.set_bundle_path(staging)
  slurm.set_root_path(staged_root)
  return slurm.SUCCESS
end

-- stage_out: the writable copied volumes' new and changed files back to their sources
-- (copy-back.sh of stage_in; with the cache, through the overlays); false if that failed
local function copy_volumes_back(id, staging, prefix)
  if not read_file(staging .. "/copy-back.sh") then return true end
  local status, output = slurm.allocator_command(table.concat({
    prefix or "", (prefix and "in_ns " or "") .. "/bin/sh " .. q(staging .. "/copy-back.sh") },
    "\n"))
  if status ~= 0 then
    slurm.log_error("scrun-staging: %s: copying the container's volumes back failed with "
                    .. "status %s: %s", id, tostring(status), ((output or ""):gsub("%s+$", "")))
    return false
  end
  local files = 0
  for name in (output or ""):gmatch("back=([^\n]*)") do
    if name ~= "./" and name:sub(-1) ~= "/" then files = files + 1 end
  end
  if files > 0 then
    slurm.log_info("scrun-staging: %s: copied %d new or changed files of its volumes back to "
                   .. "their sources", id, files)
  end
  return true
end

local function stage_out_cached(id, entry, staging, staged_root, orig_root_path, job_id,
                                user_id)
  local cache = (CACHE_BASE:gsub("%%u", tostring(math.floor(user_id))))
  local ok = true
  if SYNC_BACK then
    ok = write_file(staging .. "/sync-back.sh", table.concat({
      ". " .. q(staging .. "/overlays.sh"), COPY_FUNCTIONS,
      format("rsync_copy $RSYNC_NOOWN --exclude-from=%s %s %s",
             q(staging .. "/rootfs-excludes"), q(staged_root .. "/"), q(orig_root_path .. "/")),
    }, "\n") .. "\n")
    local status, output = slurm.allocator_command(table.concat({
      CACHE_FUNCTIONS, cache_vars(staging, cache, id, job_id),
      'if [ "$(snap)" = "$(cat -- "$S/snapshot" 2>/dev/null)" ]; then echo unchanged; exit 0; fi',
      'echo changed',
      '[ "$(id -u)" = 0 ] || export RSYNC_NOOWN="--no-owner --no-group"',
      'in_ns /bin/sh "$S/sync-back.sh"',
    }, "\n"))
    output = output or ""
    if status ~= 0 or not ok then
      slurm.log_error("scrun-staging: copying %s back to %s failed with status %s: %s",
                      staged_root, orig_root_path, tostring(status), (output:gsub("%s+$", "")))
      ok = false
    elseif output:find("unchanged") then
      slurm.log_info("scrun-staging: %s: the container changed nothing in its rootfs: no copy "
                     .. "back", id)
    else
      slurm.log_info("scrun-staging: %s: copied the container's changes back to %s", id,
                     orig_root_path)
    end
  end
  -- after the snapshot's check: mounting the overlays again touches their work dirs
  local volumes_ok = copy_volumes_back(id, staging, CACHE_FUNCTIONS .. "\n"
                                       .. cache_vars(staging, cache, id, job_id))
  local status, output = slurm.allocator_command(table.concat({
    CACHE_FUNCTIONS, cache_vars(staging, cache, id, job_id), "E=" .. q(entry),
    'exec 9>>"$C/lock"; flock 9 || exit 1',
    'rm -f -- "$E/users/$ID"',
    "evict " .. max_kb(),
    'exec 9>&-',
    'empty_trash',
  }, "\n"))
  for line in (output or ""):gmatch("evicted (%x+)") do
    slurm.log_info("scrun-staging: evicted cache entry %s", line)
  end
  if status ~= 0 then
    slurm.log_error("scrun-staging: releasing cache entry %s failed with status %s: %s", entry,
                    tostring(status), ((output or ""):gsub("%s+$", "")))
  end
  if not (ok and volumes_ok) then
    slurm.log_error("scrun-staging: keeping %s because the copy back failed", staging)
    return slurm.FAILURE
  end
  if not remove(staging) then return slurm.FAILURE end
  return slurm.SUCCESS
end

local function job_var(job_env, name)
  for _, entry in ipairs(job_env or {}) do
    local value = type(entry) == "string" and entry:match("^" .. name .. "=(.*)$")
    if value then return value end
  end
  return nil
end

-- nil when the bases can hold this job's copies, else the one-line reason they cannot:
-- unset, or on this machine's own disk while the job runs elsewhere
local function base_problem(job_env)
  local bases = { { "STAGING_BASE", STAGING_BASE } }
  if CACHE then table.insert(bases, { "CACHE_BASE", CACHE_BASE }) end
  local nodes = job_var(job_env, "SLURM_JOB_NODELIST")
  local host = (read_file("/proc/sys/kernel/hostname") or ""):gsub("%s+$", ""):gsub("%..*$", "")
  for _, setting in ipairs(bases) do
    local name, base = setting[1], setting[2]
    if type(base) ~= "string" or base == "" then
      return format("%s is not set: set it at the top of scrun.lua to a directory of a "
                    .. "filesystem every node sees (the shared scratch)", name)
    end
    if under(base, MACHINE_LOCAL) and nodes and nodes ~= host then
      return format("%s %s is on this machine's own disk, which the job's nodes (%s) do "
                    .. "not see: set it at the top of scrun.lua to a directory of a "
                    .. "filesystem they share (the shared scratch, with %%u)",
                    name, base, nodes)
    end
  end
  return nil
end

function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id,
                              group_id, job_env)
  local problem = base_problem(job_env)
  if problem then
    slurm.log_error("scrun-staging: %s", problem)
    return slurm.FAILURE
  end
  local base, staging, staged_root = paths(id, user_id)
  local text, err = read_file(config_file)
  if not text then
    slurm.log_error("scrun-staging: cannot read %s: %s", config_file, tostring(err))
    return slurm.FAILURE
  end
  local config = slurm.from_json(text)
  local source_root = (config.root and config.root.path) or "rootfs"
  if source_root:sub(1, 1) ~= "/" then source_root = bundle .. "/" .. source_root end
  if CACHE then
    local result = stage_in_cached(id, text, source_root, job_id, user_id, group_id, job_env)
    if result ~= nil then return result end
  end

  slurm.log_info("scrun-staging: copying %s to %s", source_root, staged_root)
  local prepare = table.concat({
    "umask 077",
    "set -e", owned_dir(base), "set +e",
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
    local copies = rewrite_config(config, staged_root, user_id, group_id, job_env,
                                  shared_sources(config))
    for _, copy in ipairs(copies) do table.insert(excludes, copy.destination) end
    if #copies > 0 then ok = copy_into_rootfs(id, copies, staged_root, user_id) end
    local back = ok and copy_back_script(copies, staged_root, user_id)
    if back then ok = write_file(staging .. "/copy-back.sh", back) end
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
  local entry = read_file(staging .. "/cache-entry")
  if entry then
    return stage_out_cached(id, (entry:gsub("%s+$", "")), staging, staged_root, orig_root_path,
                            job_id, user_id)
  end
  if not copy_volumes_back(id, staging) then
    slurm.log_error("scrun-staging: keeping %s because the copy back failed", staging)
    return slurm.FAILURE
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
