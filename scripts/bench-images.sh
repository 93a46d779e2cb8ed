#!/bin/bash
# Real-size images for the staging bench (bench/images.py), built from what is on this
# machine (no registry), imported into the engines of scripts/engines.sh.  Root only;
# idempotent.
#
#   scripts/bench-images.sh build    the two image tarballs in $SCRUN_BENCH_IMAGES:
#       scrun-bench-py.tar     ~150 MB, a Debian-like userland with python3: busybox's
#                              applets, the machine's python3 with its shared libraries,
#                              its standard library and dist-packages
#       scrun-bench-conda.tar  ~1 GB with many small files, as a conda or CUDA image:
#                              the above, the machine's /usr/share, ~12,000 generated
#                              small files (a package tree) and 200 MB of generated
#                              "libraries"
#   scripts/bench-images.sh import   (Debian's lua-dkjson, for Slurm's scrun before 25.11)
#                              both into root podman and the test user's rootless
#                              podman (their stores need no daemon), and into the root
#                              and rootless dockerd of the cluster whose environment is
#                              set (scripts/engines.sh env), where they run
#   scripts/bench-images.sh remove   both out of every engine import reached, and
#                              $SCRUN_BENCH_IMAGES with the tarballs (and the bench's
#                              private dockerd data, bench/images.py) removed
#   scripts/bench-images.sh list     which engines hold them
#
# $SCRUN_BENCH_IMAGES: /var/tmp/scrun-bench-images by default (the machine's disk: the
# tarballs and rootfs trees are large, keep them out of /tmp).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
DIR=${SCRUN_BENCH_IMAGES:-/var/tmp/scrun-bench-images}
TEST_USER=${SCRUN_TEST_USER:-scruntest}
IMAGES=(scrun-bench-py scrun-bench-conda)

log() { printf '[bench-images] %s\n' "$*" >&2; }

[ "$(id -u)" = 0 ] || { log "run as root"; exit 1; }

# the engines' environment (DOCKER_HOST, CONTAINERS_CONF, the rootless dockerd's host)
eval "$("$REPO/scripts/engines.sh" env 2>/dev/null | sed 's/^/export /')" || true

user_run() {  # as the test user, as scripts/engines.sh runs rootless podman and docker
    local uid gid home
    uid=$(id -u "$TEST_USER"); gid=$(id -g "$TEST_USER")
    home=$(getent passwd "$TEST_USER" | cut -d: -f6)
    (cd / && setpriv --reuid="$uid" --regid="$gid" --init-groups -- env -i HOME="$home" \
        USER="$TEST_USER" LOGNAME="$TEST_USER" PATH=/usr/local/bin:/usr/bin:/bin \
        XDG_RUNTIME_DIR="/run/user/$uid" "$@")
}

copy_tree() {  # SRC DEST: SRC's files (symlinks kept) under DEST, parents made
    mkdir -p "$2"
    cp -a --no-preserve=xattr,context -- "$1/." "$2/"
}

base_rootfs() {  # DIR: the ~150 MB userland
    local d=$1 a lib
    mkdir -p "$d"/{usr/bin,usr/lib/x86_64-linux-gnu,usr/lib64,etc,tmp,proc,sys,dev,root,var/tmp,run,home}
    ln -s usr/bin "$d/bin"; ln -s usr/bin "$d/sbin"; ln -s usr/lib "$d/lib"; ln -s usr/lib64 "$d/lib64"
    cp /bin/busybox "$d/usr/bin/busybox"
    for a in $(/bin/busybox --list); do
        [ -e "$d/usr/bin/$a" ] || ln -s busybox "$d/usr/bin/$a"
    done
    cp -L /usr/bin/python3 "$d/usr/bin/python3.11"
    ln -sf python3.11 "$d/usr/bin/python3"; ln -sf python3 "$d/usr/bin/python"
    for lib in $(ldd /usr/bin/python3 | grep -o '/[^ ]*'); do
        cp -L "$lib" "$d/usr/lib/x86_64-linux-gnu/"
    done
    cp -L /lib64/ld-linux-x86-64.so.2 "$d/usr/lib64/"
    copy_tree /usr/lib/python3.11 "$d/usr/lib/python3.11"
    copy_tree /usr/lib/python3 "$d/usr/lib/python3"
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$d/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' > "$d/etc/group"
    printf 'PRETTY_NAME="scrun-py bench image"\nID=debian\n' > "$d/etc/os-release"
    chmod 1777 "$d/tmp" "$d/var/tmp"
}

conda_rootfs() {  # DIR: the ~1 GB image with many small files
    local d=$1 i j
    base_rootfs "$d"
    copy_tree /usr/share "$d/usr/share"
    # a package tree: 120 packages of 100 small files (1-8 KB) each
    for i in $(seq -w 1 120); do
        mkdir -p "$d/opt/conda/pkgs/pkg$i/lib" "$d/opt/conda/pkgs/pkg$i/include"
        for j in $(seq -w 1 50); do
            head -c $(( (RANDOM % 8 + 1) * 1024 )) /dev/urandom > "$d/opt/conda/pkgs/pkg$i/lib/mod$j.py"
            head -c $(( (RANDOM % 4 + 1) * 1024 )) /dev/urandom > "$d/opt/conda/pkgs/pkg$i/include/h$j.h"
        done
    done
    # the large libraries of a CUDA image: 10 files of 20 MB
    mkdir -p "$d/usr/local/cuda/lib64"
    for i in $(seq 1 10); do
        head -c 20M /dev/urandom > "$d/usr/local/cuda/lib64/libcudabench$i.so"
    done
}

build() {
    install -d -m 755 "$DIR"
    local name fn tmp
    for name in "${IMAGES[@]}"; do
        [ -f "$DIR/$name.tar" ] && { log "$name.tar is there"; continue; }
        case $name in scrun-bench-py) fn=base_rootfs ;; *) fn=conda_rootfs ;; esac
        tmp=$DIR/$name.rootfs
        rm -rf "$tmp"
        log "building $name"
        "$fn" "$tmp"
        tar -C "$tmp" --numeric-owner --owner=0 --group=0 -cf "$DIR/$name.tar.new" .
        log "$name: $(du -sm "$tmp" | cut -f1) MB, $(find "$tmp" | wc -l) files and directories"
        rm -rf "$tmp"
        chmod 644 "$DIR/$name.tar.new"
        mv "$DIR/$name.tar.new" "$DIR/$name.tar"
    done
}

# the engines an image goes into: "what" and the command prefix that runs that engine
engines() {
    echo "root-podman|podman"
    echo "rootless-podman|user_run podman"
    if [ -n "${DOCKER_HOST:-}" ] && docker version >/dev/null 2>&1; then
        echo "root-docker|docker"
    fi
    if [ -n "${SCRUN_TEST_ROOTLESS_DOCKER_HOST:-}" ] &&
        user_run env DOCKER_HOST="$SCRUN_TEST_ROOTLESS_DOCKER_HOST" docker version >/dev/null 2>&1; then
        echo "rootless-docker|user_run env DOCKER_HOST=$SCRUN_TEST_ROOTLESS_DOCKER_HOST docker"
    fi
}

ref() {  # ENGINE NAME: how that engine names the image
    case $1 in *podman) echo "localhost/$2" ;; *) echo "$2" ;; esac
}

import() {
    local what cmd name q
    # Slurm before 25.11 has no slurm.from_json: scrun(1)'s example of those releases
    # loads a JSON module, which bench/images.py gives Slurm's scrun
    "$REPO/scripts/apt-install.sh" bench-images lua-dkjson
    for name in "${IMAGES[@]}"; do
        [ -f "$DIR/$name.tar" ] || { log "no $DIR/$name.tar: run '$0 build' first"; exit 1; }
    done
    while IFS='|' read -r what cmd; do
        for name in "${IMAGES[@]}"; do
            if $cmd image inspect "$(ref "$what" "$name")" >/dev/null 2>&1; then
                continue
            fi
            log "importing $name into $what"
            # the test user reads the tarball from its standard input
            case $what in *podman) q=-q ;; *) q="" ;; esac
            # shellcheck disable=SC2086
            $cmd import $q - "$(ref "$what" "$name")" < "$DIR/$name.tar" >/dev/null
        done
    done < <(engines)
}

present() {  # each image an engine holds: "WHAT|CMD|NAME" per line
    local what cmd name
    while IFS='|' read -r what cmd; do
        for name in "${IMAGES[@]}"; do
            if $cmd image inspect "$(ref "$what" "$name")" >/dev/null 2>&1; then
                echo "$what|$cmd|$name"
            fi
        done
    done < <(engines)
}

remove() {
    local what cmd name
    while IFS='|' read -r what cmd name; do
        log "removing $name from $what"
        $cmd rmi -f "$(ref "$what" "$name")" >/dev/null
    done < <(present)
    if [ -d "$DIR" ]; then
        # what a stopped private dockerd of the bench left mounted (its data root)
        local m
        for m in $(findmnt -rn -o TARGET | grep -F -- "$DIR/" | sort -r); do
            log "unmounting $m"
            umount "$m" 2>/dev/null || umount -l "$m"
        done
        log "removing $DIR"
        rm -rf -- "$DIR"
    fi
}

list() {
    local what cmd name
    while IFS='|' read -r what cmd name; do
        echo "$what $name"
    done < <(present)
}

case "${1:-}" in
    build) build ;;
    import) build; import ;;
    remove) remove ;;
    list) list ;;
    *) echo "usage: $0 build|import|remove|list" >&2; exit 2 ;;
esac
