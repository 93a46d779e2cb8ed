#!/bin/bash
# Docker and podman with scrun-py as their OCI runtime, on the local cluster of
# scripts/cluster.sh (which must be up).  Root only; idempotent.
#
#   scripts/engines.sh up     write the engine configuration from docs/docker.md and
#                             docs/podman.md, start a private dockerd and a rootless
#                             dockerd of the test user (rootlesskit, as Slurm's containers
#                             guide sets docker up), import a busybox image into both
#                             dockers and into podman (root and the test user)
#   scripts/engines.sh down   stop both dockerds: the root one with its containerd, the
#                             rootless one with its rootlesskit and every process in its
#                             user namespace
#   scripts/engines.sh down --all
#                             also stop the pause process of the test user's rootless
#                             podman
#   scripts/engines.sh env    print the environment the engine tests use
#
# The configuration files are the blocks of the docs (scripts/doc-block.sh), with the
# docs' site paths replaced by the test cluster's:
#   /opt/scrun-py/bin/scrun-py     -> $VENV/bin/scrun-py
#   /etc/slurm/                    -> $STATE/engines/conf/  (slurm.conf and oci.conf are
#                                     links to the cluster's; scrun.lua is
#                                     lua/scrun-staging.lua, as the docs say)
#   /usr/local/bin/scrun-py-slurm  -> $STATE/engines/podman/scrun-py-slurm
set -euo pipefail
# The descriptors the caller left open (the lock of `flock FILE scripts/engines.sh up`) are
# closed: dockerd and containerd would inherit them and hold that lock as long as they live
for _fd in /proc/$$/fd/*; do
    _fd=${_fd##*/}
    case "$_fd" in 0|1|2|255) ;; *) eval "exec $_fd>&-" 2>/dev/null || true ;; esac
done
unset _fd

STATE=${SCRUN_TEST_STATE:-/var/lib/scrun-py-test}
TEST_USER=${SCRUN_TEST_USER:-scruntest}
VENV=${SCRUN_TEST_VENV:-/opt/scrun-py/venv}
REPO=$(cd "$(dirname "$0")/.." && pwd)
ENG=$STATE/engines
# the engines' scrun-py reads slurm.conf, oci.conf and scrun.lua here: the cluster's files
# (links) and lua/scrun-staging.lua, or, for the site cluster (SCRUN_TEST_ENGINE_CONF=
# /run/slurm/conf), the configless login node's copies that sackd fetched
CONF=${SCRUN_TEST_ENGINE_CONF:-$ENG/conf}
DOCKER=$STATE/docker
DOCKER_SOCK=$DOCKER/docker.sock
IMAGE=scrun-busybox
# The rootless dockerd of the test user, one per cluster (each has its own slurm.conf):
#   $RL_DIR/daemon.json              docs/docker.md's rootless blocks (root's files: the
#   $RL_DIR/dockerd-rootless.env     daemon reads them, its user cannot change them)
#   $RL_DIR/$TEST_USER/data          its data root: the login node's local disk, not /home
#   $RL_DIR/$TEST_USER/rootlesskit   rootlesskit's state dir
#   /run/user/UID/scrun-py-test/<cluster>/   its exec root, socket and pid file (the
#                                    user's XDG_RUNTIME_DIR, as rootless dockerd's defaults)
RL_DIR=$STATE/rootless-docker
RL_USER_DIR=$RL_DIR/$TEST_USER
ROOTLESS_SH=/usr/share/docker.io/contrib/dockerd-rootless.sh
PODMAN_CONF=$ENG/podman/containers.conf

log() { printf '[engines] %s\n' "$*" >&2; }

from_doc() {  # DOC TITLE DEST MODE
    local tmp=$3.new
    "$REPO/scripts/doc-block.sh" "$REPO/docs/$1" "$2" |
        sed -e "s#/opt/scrun-py/bin/scrun-py#$VENV/bin/scrun-py#g" \
            -e "s#/etc/slurm/#$CONF/#g" \
            -e "s#/usr/local/bin/scrun-py-slurm#$ENG/podman/scrun-py-slurm#g" > "$tmp"
    chmod "$4" "$tmp"
    mv "$tmp" "$3"
}

rl_run_dir() {  # the rootless dockerd's exec root, socket and pid file live here
    local uid
    uid=$(id -u "$TEST_USER" 2>/dev/null) || return 1
    echo "/run/user/$uid/scrun-py-test/$(basename "$STATE")"
}

user_run() {  # run a command as the test user, the way the tests do
    local uid gid home
    uid=$(id -u "$TEST_USER"); gid=$(id -g "$TEST_USER")
    home=$(getent passwd "$TEST_USER" | cut -d: -f6)
    (cd / && setpriv --reuid="$uid" --regid="$gid" --init-groups -- env -i HOME="$home" \
        USER="$TEST_USER" LOGNAME="$TEST_USER" PATH=/usr/local/bin:/usr/bin:/bin \
        XDG_RUNTIME_DIR="/run/user/$uid" CONTAINERS_CONF="$PODMAN_CONF" "$@")
}

write_config() {
    [ -f "$STATE/slurm.conf" ] || { log "no cluster: run scripts/cluster.sh up first"; exit 1; }
    install -d -m 755 "$ENG" "$ENG/podman" "$DOCKER"
    if [ "$CONF" = "$ENG/conf" ]; then
        install -d -m 755 "$CONF"
        ln -sfn "$STATE/slurm.conf" "$CONF/slurm.conf"
        ln -sfn "$STATE/oci.conf" "$CONF/oci.conf"
        install -m 644 "$REPO/lua/scrun-staging.lua" "$CONF/scrun.lua"
        # the site file: /home is shared by every node here (one machine), so a volume
        # from under it stays a bind mount (docs/staging.md, "Volumes")
        local shared='"/home"'
        case "$STATE" in *-[0-9]n|*-[0-9][0-9]n) shared="$shared, \"${SCRUN_TEST_SCRATCH:-/shared/scratch}\"" ;; esac
        printf '[staging]\nshared_paths = [%s]\n' "$shared" > "$CONF/scrun-py.toml"
        chmod 644 "$CONF/scrun-py.toml"
        case "$STATE" in
            *-[0-9]n|*-[0-9][0-9]n)
                # a multi-node cluster (cluster.sh up --nodes N): the staging bases on the
                # scratch its nodes share, as a site sets them (the /tmp default is refused
                # for a job on other nodes)
                local scratch=${SCRUN_TEST_SCRATCH:-/shared/scratch}
                sed -i -e 's|^local STAGING_BASE = .*|local STAGING_BASE = "'"$scratch"'/%u/scrun-staging"|' \
                    -e 's|^local CACHE_BASE = .*|local CACHE_BASE = "'"$scratch"'/%u/scrun-cache"|' \
                    "$CONF/scrun.lua"
                grep -q "^local STAGING_BASE = \"$scratch/" "$CONF/scrun.lua" ||
                    { log "lua/scrun-staging.lua: no STAGING_BASE setting to point at $scratch"; exit 1; }
                ;;
        esac
    fi
    from_doc docker.md daemon.json "$DOCKER/daemon.json" 644
    install -d -m 755 "$RL_DIR"
    from_doc docker.md rootless-daemon.json "$RL_DIR/daemon.json" 644
    from_doc docker.md dockerd-rootless.env "$RL_DIR/dockerd-rootless.env" 644
    from_doc podman.md scrun-py-slurm "$ENG/podman/scrun-py-slurm" 755
    from_doc podman.md containers.conf "$PODMAN_CONF" 644
}

rootfs_tar() {  # busybox-static with its applets in /bin and /usr/bin
    local tar=$ENG/busybox.tar dir
    [ -f "$tar" ] && return 0
    dir=$(mktemp -d)
    mkdir -p "$dir"/{bin,usr/bin,etc,tmp,proc,sys,dev,root}
    cp /bin/busybox "$dir/bin/busybox"
    local a
    for a in $("$dir/bin/busybox" --list); do
        [ "$a" = busybox ] && continue
        ln -sf /bin/busybox "$dir/bin/$a"
        ln -sf /bin/busybox "$dir/usr/bin/$a"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$dir/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' > "$dir/etc/group"
    chmod 1777 "$dir/tmp"
    tar -C "$dir" -cf "$tar.new" .
    rm -rf "$dir"
    chmod 644 "$tar.new"
    mv "$tar.new" "$tar"
}

docker_up() {
    export DOCKER_HOST=unix://$DOCKER_SOCK
    if ! docker version >/dev/null 2>&1; then
        log "starting dockerd ($DOCKER)"
        rm -f "$DOCKER/docker.pid"
        # dockerd reuses a containerd whose pid file names a live process: after a reboot
        # (or in CI, which starts from these files but none of the processes) that pid may
        # be anyone's, and dockerd then times out connecting to it.  Trust the file only
        # if the process is a containerd of this exec root.
        local cpid=$DOCKER/exec/containerd/containerd.pid
        if [ -f "$cpid" ] && ! tr '\0' ' ' <"/proc/$(cat "$cpid")/cmdline" 2>/dev/null |
                grep -q -- "containerd.*$DOCKER/exec"; then
            rm -f "$cpid"
        fi
        setsid dockerd --config-file "$DOCKER/daemon.json" --host "unix://$DOCKER_SOCK" \
            --data-root "$DOCKER/data" --exec-root "$DOCKER/exec" --pidfile "$DOCKER/docker.pid" \
            --iptables=false --ip6tables=false --bridge=none --storage-driver=overlay2 \
            </dev/null >"$DOCKER/dockerd.log" 2>&1 &
        local i
        for i in $(seq 1 300); do
            docker version >/dev/null 2>&1 && break
            [ "$i" = 300 ] && { log "dockerd did not start: $(tail -5 "$DOCKER/dockerd.log")"; exit 1; }
            sleep 0.1
        done
    else
        # daemon.json may have changed: dockerd reloads "runtimes" on SIGHUP
        kill -HUP "$(cat "$DOCKER/docker.pid")"
    fi
    docker image inspect "$IMAGE" >/dev/null 2>&1 || docker import "$ENG/busybox.tar" "$IMAGE" >/dev/null
}

rootless_docker_up() {
    # Slurm's containers guide: rootless docker, one dockerd per user under rootlesskit,
    # scrun-py its runtime, with the environment and daemon.json of docs/docker.md (the
    # daemon shares the host's network, no port driver, no bridge, no iptables rules).
    local uid run host rl_env
    uid=$(id -u "$TEST_USER"); run=$(rl_run_dir); host=unix://$run/docker.sock
    mapfile -t rl_env < <(grep -v '^[[:space:]]*\(#\|$\)' "$RL_DIR/dockerd-rootless.env")
    install -d -o "$TEST_USER" -g "$TEST_USER" -m 700 "/run/user/$uid" \
        "/run/user/$uid/scrun-py-test" "$run" "$RL_USER_DIR" "$RL_USER_DIR/data"
    # PATH: the cluster's Slurm commands first (a built release's, as the root dockerd
    # has); a daemon started with another PATH is restarted
    local path
    path=$(dirname "$(command -v salloc)"):/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
    if ! user_run env DOCKER_HOST="$host" docker version >/dev/null 2>&1 ||
       [ "$(cat "$RL_DIR/dockerd.path" 2>/dev/null)" != "$path" ]; then
        down_rootless
        log "starting the rootless dockerd of $TEST_USER ($run)"
        rm -rf "$RL_USER_DIR/rootlesskit" "$run/docker.pid" "$run/docker.sock"
        install -d -o "$TEST_USER" -g "$TEST_USER" -m 700 "$RL_USER_DIR/rootlesskit"
        # in a session of its own, as the test user with the environment user_run gives
        # (setsid does not fork here: $! is the script's pid, then rootlesskit's)
        local home
        home=$(getent passwd "$TEST_USER" | cut -d: -f6)
        echo "$path" > "$RL_DIR/dockerd.path"
        (cd / && exec setsid setpriv --reuid="$uid" --regid="$(id -g "$TEST_USER")" \
            --init-groups -- env -i HOME="$home" USER="$TEST_USER" LOGNAME="$TEST_USER" \
            PATH="$path" XDG_RUNTIME_DIR="/run/user/$uid" \
            "${rl_env[@]}" DOCKERD_ROOTLESS_ROOTLESSKIT_FLAGS="--state-dir=$RL_USER_DIR/rootlesskit" \
            "$ROOTLESS_SH" --config-file "$RL_DIR/daemon.json" \
            --data-root "$RL_USER_DIR/data" --exec-root "$run/docker" --host "$host" \
            --pidfile "$run/docker.pid" </dev/null >"$RL_DIR/dockerd.log" 2>&1) &
        echo $! > "$RL_DIR/rootlesskit.pid"
        local i
        for i in $(seq 1 300); do
            user_run env DOCKER_HOST="$host" docker version >/dev/null 2>&1 && break
            [ "$i" = 300 ] && { log "rootless dockerd did not start: $(tail -5 "$RL_DIR/dockerd.log")"; exit 1; }
            sleep 0.1
        done
    else
        # daemon.json may have changed: dockerd reloads "runtimes" on SIGHUP
        kill -HUP "$(cat "$run/docker.pid")"
    fi
    user_run env DOCKER_HOST="$host" docker image inspect "$IMAGE" >/dev/null 2>&1 ||
        user_run env DOCKER_HOST="$host" docker import "$ENG/busybox.tar" "$IMAGE" >/dev/null
}

podman_up() {
    CONTAINERS_CONF=$PODMAN_CONF podman image exists "localhost/$IMAGE" ||
        CONTAINERS_CONF=$PODMAN_CONF podman import -q "$ENG/busybox.tar" "localhost/$IMAGE" >/dev/null
    # rootless podman needs a home it owns and a runtime dir
    local uid home
    uid=$(id -u "$TEST_USER"); home=$(getent passwd "$TEST_USER" | cut -d: -f6)
    if [ "$(stat -c %u "$home")" != "$uid" ]; then
        log "giving $home back to $TEST_USER"
        chown -R "$TEST_USER:" "$home"
    fi
    install -d -o "$TEST_USER" -g "$TEST_USER" -m 700 "/run/user/$uid"
    # vfs storage: a rootless overlay (podman 5's default, Debian 13) is mounted in podman's
    # own mount namespace, where crun on a node cannot see it (docs/podman.md)
    rootless_podman_storage "$home"
    user_run podman image exists "localhost/$IMAGE" ||
        user_run podman import -q "$ENG/busybox.tar" "localhost/$IMAGE" >/dev/null
}

# The test user's rootless podman storage: vfs, on the login node's local disk
# ($ROOTLESS_STORAGE/USER, not the shared home, as sites keep it; the site cluster's nodes
# do not see it, scripts/cluster.sh).  vfs: a rootless overlay (podman 5's default, Debian
# 13) is mounted in podman's own mount namespace, where crun on a node cannot see it
# (docs/podman.md).
ROOTLESS_STORAGE=/var/lib/scrun-py-test-rootless
rootless_podman_storage() {  # HOME
    local home=$1 graph=$ROOTLESS_STORAGE/$TEST_USER/storage
    [ "$(user_run podman info --format '{{.Store.GraphDriverName}} {{.Store.GraphRoot}}' 2>/dev/null)" \
        = "vfs $graph" ] && return 0
    log "rootless podman of $TEST_USER: vfs storage in $graph"
    # the old store goes first (podman refuses a driver its database was not made with),
    # with its configuration still in place
    user_run podman system reset -f >/dev/null 2>&1 || true
    install -d -m 755 "$ROOTLESS_STORAGE"
    install -d -o "$TEST_USER" -g "$TEST_USER" -m 700 "$ROOTLESS_STORAGE/$TEST_USER"
    install -d -o "$TEST_USER" -g "$TEST_USER" "$home/.config" "$home/.config/containers"
    printf '[storage]\ndriver = "vfs"\ngraphroot = "%s"\n' "$graph" > "$home/.config/containers/storage.conf"
    chown "$TEST_USER:" "$home/.config/containers/storage.conf"
    [ "$(user_run podman info --format '{{.Store.GraphDriverName}} {{.Store.GraphRoot}}' 2>/dev/null)" \
        = "vfs $graph" ] || { log "rootless podman of $TEST_USER still not on vfs storage in $graph"; exit 1; }
}

sweep() {
    # containers (and their spool dirs) that an earlier, interrupted run left behind: CI
    # runs on a copy of this machine, and the engine tests count leftovers.  Our dockerd
    # holds only test containers; podman's stores are the machine's, so only containers
    # of the runtime "slurm" go there.
    local ids id uid
    ids=$(docker ps -aq 2>/dev/null || true)
    # shellcheck disable=SC2086
    [ -z "$ids" ] || { log "removing containers of an earlier run from dockerd"; docker rm -f $ids >/dev/null 2>&1 || true; }
    for id in $(CONTAINERS_CONF=$PODMAN_CONF podman ps -aq 2>/dev/null); do
        [ "$(CONTAINERS_CONF=$PODMAN_CONF podman inspect -f '{{.OCIRuntime}}' "$id" 2>/dev/null)" = slurm ] || continue
        log "removing podman container $id of an earlier run"
        CONTAINERS_CONF=$PODMAN_CONF podman rm -f "$id" >/dev/null 2>&1 || true
    done
    for id in $(user_run podman ps -aq 2>/dev/null); do
        [ "$(user_run podman inspect -f '{{.OCIRuntime}}' "$id" 2>/dev/null)" = slurm ] || continue
        log "removing rootless podman container $id of an earlier run"
        user_run podman rm -f "$id" >/dev/null 2>&1 || true
    done
    local host
    host=unix://$(rl_run_dir)/docker.sock
    ids=$(user_run env DOCKER_HOST="$host" docker ps -aq 2>/dev/null || true)
    # shellcheck disable=SC2086
    [ -z "$ids" ] || { log "removing containers of an earlier run from the rootless dockerd"
        user_run env DOCKER_HOST="$host" docker rm -f $ids >/dev/null 2>&1 || true; }
    # spool dirs no container owns any more: scrun-py ends whatever is left of them
    uid=$(id -u "$TEST_USER")
    for id in "$(rl_run_dir)"/docker/runtime-runc/moby/*/; do
        [ -d "$id" ] && user_run "$VENV/bin/scrun-py" --root "$(rl_run_dir)/docker/runtime-runc/moby" delete --force "$(basename "$id")" >/dev/null 2>&1 || true
    done
    for id in /run/scrun/*/; do
        [ -d "$id" ] && "$VENV/bin/scrun-py" --root /run/scrun delete --force "$(basename "$id")" >/dev/null 2>&1 || true
    done
    for id in /run/user/"$uid"/scrun/*/; do
        [ -d "$id" ] && user_run "$VENV/bin/scrun-py" --root "/run/user/$uid/scrun" delete --force "$(basename "$id")" >/dev/null 2>&1 || true
    done
}

# shellcheck source=scripts/stop-lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/stop-lib.sh"

ours() {  # PIDFILE PATTERN: the pid of the file when its command line has PATTERN
    local pid
    pid=$(cat "$1" 2>/dev/null || true)
    # a pid file left from an earlier boot (CI runs on a copy of this machine) may name
    # another process now
    [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$2" && echo "$pid"
    return 0
}

down() {
    local shims
    # dockerd stops its containers and its containerd
    # shellcheck disable=SC2046
    stop dockerd $(ours "$DOCKER/docker.pid" "$DOCKER/")
    # shellcheck disable=SC2046
    stop containerd $(ours "$DOCKER/exec/containerd/containerd.pid" "$DOCKER/exec")
    # the shims of containers a killed containerd left: one argument of their command line
    # is its socket
    shims=$(grep -lszxF -- "$DOCKER/exec/containerd/containerd.sock" /proc/[0-9]*/cmdline | cut -d/ -f3 || true)
    # shellcheck disable=SC2086
    stop "containerd shims" $shims
    # what a stopped dockerd can leave mounted under its dirs (exec/netns/default)
    local m
    for m in $(findmnt -rn -o TARGET | grep -F -- "$DOCKER/" | sort -r); do
        log "unmounting $m"
        umount "$m" 2>/dev/null || umount -l "$m" || true
    done
    down_rootless
}

userns_pids() {  # NS: the live processes in user namespace NS (user:[inode])
    local p
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/ns/user" 2>/dev/null)" = "$1" ] && running "${p#/proc/}" && echo "${p#/proc/}"
    done
    return 0
}

down_rootless() {  # [STATE]: the rootless dockerd of that cluster (default: this one's)
    # the rootless dockerd stops its containers and its containerd; rootlesskit ends with
    # it.  Whatever else still runs in rootlesskit's user namespace (the shims, an anchor
    # a killed dockerd left) goes after; its mounts go with the namespace.
    local state=${1:-$STATE} rl run kit dpid ns p left
    rl=$state/rootless-docker
    run=$(STATE=$state rl_run_dir) || return 0
    kit=$(ours "$rl/rootlesskit.pid" "$rl/daemon.json")
    dpid=$(ours "$run/docker.pid" "$run/docker.pid")
    ns=""
    for p in $dpid $(grep -lx "PPid:[[:space:]]*${kit:-none}" /proc/[0-9]*/status 2>/dev/null | cut -d/ -f3); do
        ns=$(readlink "/proc/$p/ns/user" 2>/dev/null) && [ "$ns" != "$(readlink /proc/1/ns/user)" ] && break
        ns=""
    done
    # shellcheck disable=SC2086
    stop "rootless dockerd of $TEST_USER ($state)" $dpid
    if [ -n "$ns" ]; then
        # shellcheck disable=SC2046
        stop "processes left in the rootless dockerd's namespace" $(userns_pids "$ns")
    fi
    # shellcheck disable=SC2086
    stop "rootlesskit of $TEST_USER ($state)" $kit
    rm -f "$rl/rootlesskit.pid"
    left=""
    [ -z "$ns" ] || left=$(userns_pids "$ns")
    # its mounts were in its own mount namespace: none may show here
    left+=$(grep -F -e " $rl/" -e " $run/" /proc/self/mountinfo | cut -d' ' -f5 || true)
    [ -z "$left" ] || { log "left by the rootless dockerd of $TEST_USER: $left"; return 1; }
}

down_podman() {
    # the rootless podman of the test user keeps a pause process (catatonit) holding its
    # user namespace; podman starts it again when it needs it
    local uid pid
    uid=$(id -u "$TEST_USER" 2>/dev/null) || return 0
    pid=$(cat "/run/user/$uid/libpod/tmp/pause.pid" 2>/dev/null || true)
    [ -n "$pid" ] && [ "$(stat -c %u "/proc/$pid" 2>/dev/null)" = "$uid" ] &&
        [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = catatonit ] || return 0
    stop "rootless podman pause process of $TEST_USER" "$pid"
}

case "${1:-up}" in
    up)
        command -v dockerd >/dev/null && command -v podman >/dev/null ||
            { log "docker.io and podman are not installed (scripts/cluster.sh up installs them)"; exit 1; }
        # what rootless docker needs besides docker.io (Slurm's containers guide)
        "$REPO/scripts/apt-install.sh" engines rootlesskit slirp4netns uidmap
        write_config
        rootfs_tar
        docker_up
        rootless_docker_up
        podman_up
        sweep
        log "engines up: DOCKER_HOST=unix://$DOCKER_SOCK (rootless, $TEST_USER: unix://$(rl_run_dir)/docker.sock) CONTAINERS_CONF=$PODMAN_CONF image $IMAGE"
        ;;
    down)
        down
        if [ "${2:-}" = --all ]; then
            # the rootless dockerds of every cluster, a cluster without slurm.conf too
            for d in "$STATE" "$STATE"-*; do
                [ -d "$d/rootless-docker" ] && { down_rootless "$d" || true; }
            done
            down_podman
        fi
        ;;
    env)
        echo "DOCKER_HOST=unix://$DOCKER_SOCK"
        echo "CONTAINERS_CONF=$PODMAN_CONF"
        echo "SCRUN_TEST_IMAGE=$IMAGE"
        if run=$(rl_run_dir); then
            echo "SCRUN_TEST_ROOTLESS_DOCKER_HOST=unix://$run/docker.sock"
            # the --root the rootless dockerd gives scrun-py
            echo "SCRUN_TEST_ROOTLESS_DOCKER_ROOT=$run/docker/runtime-runc/moby"
        fi
        ;;
    *) echo "usage: $0 up|down [--all]|env" >&2; exit 2 ;;
esac
