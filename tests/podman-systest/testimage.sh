#!/bin/bash
# The stand-in for podman's system-test image (test/system/build-testimage of podman's
# source: alpine with busybox-extras, /home/podman/testimage-id and /home/podman/pause,
# WORKDIR /home/podman, a CMD that echoes a fixed line, two labels), made from the
# machine's busybox-static and imported under the name the tests expect, so that no
# registry is used.
#
#   tests/podman-systest/testimage.sh PODMAN IMAGE TAG
#       PODMAN   the podman command (a wrapper naming the store)
#       IMAGE    the name the tests use (quay.io/libpod/testimage:TAG)
#       TAG      its tag (YYYYMMDD), written to /home/podman/testimage-id
# Nothing is done when the store already has IMAGE made by this recipe (its label
# org.scrun-py.recipe is the recipe's sha256); an IMAGE of another recipe is replaced.
set -euo pipefail
PODMAN=${1:?usage: $0 PODMAN IMAGE TAG}
IMAGE=${2:?usage: $0 PODMAN IMAGE TAG}
TAG=${3:?usage: $0 PODMAN IMAGE TAG}
BUSYBOX=${BUSYBOX:-/bin/busybox}

RECIPE=$(sha256sum "$0" | cut -c1-64)
if "$PODMAN" image exists "$IMAGE"; then
    [ "$("$PODMAN" image inspect -f '{{index .Labels "org.scrun-py.recipe"}}' "$IMAGE")" = "$RECIPE" ] && exit 0
    "$PODMAN" rmi -f "$IMAGE" >/dev/null
fi
file "$BUSYBOX" 2>/dev/null | grep -q 'statically linked' || [ ! -x /usr/bin/file ] ||
    { echo "testimage: $BUSYBOX is not statically linked (install busybox-static)" >&2; exit 1; }

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
root=$dir/rootfs
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,proc,sys,dev,root,var/tmp,home/podman}
cp "$BUSYBOX" "$root/bin/busybox"
# every applet where alpine has it (--list-full gives bin/ls, sbin/ip, usr/bin/tail, ...)
while read -r applet; do
    [ "$applet" = bin/busybox ] || ln -sf /bin/busybox "$root/$applet"
done < <("$root/bin/busybox" --list-full)
chmod 1777 "$root/tmp" "$root/var/tmp"
# alpine's busybox has printenv, Debian's busybox-static does not
cat > "$root/usr/bin/printenv" <<'EOF'
#!/bin/sh
# printenv [NAME...]
[ $# -eq 0 ] && exec env
rc=0
for name; do
    if eval "[ \"\${$name+set}\" = set ]"; then eval "printf '%s\\n' \"\$$name\""; else rc=1; fi
done
exit $rc
EOF
chmod 755 "$root/usr/bin/printenv"
ln -s /usr/bin/printenv "$root/bin/printenv"
# alpine's /etc/mtab (030-run's "no /etc/mtab" test removes it in a build)
ln -s ../proc/mounts "$root/etc/mtab"

# alpine's users and groups (the tests use root, uid 100 and the group ping)
cat > "$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/ash
bin:x:1:1:bin:/bin:/sbin/nologin
daemon:x:2:2:daemon:/sbin:/sbin/nologin
adm:x:3:4:adm:/var/adm:/sbin/nologin
lp:x:4:7:lp:/var/spool/lpd:/sbin/nologin
sync:x:5:0:sync:/sbin:/bin/sync
shutdown:x:6:0:shutdown:/sbin:/sbin/shutdown
halt:x:7:0:halt:/sbin:/sbin/halt
mail:x:8:12:mail:/var/mail:/sbin/nologin
operator:x:11:0:operator:/root:/sbin/nologin
games:x:35:35:games:/usr/games:/sbin/nologin
ntp:x:123:123:NTP:/var/empty:/sbin/nologin
guest:x:405:100:guest:/dev/null:/sbin/nologin
nobody:x:65534:65534:nobody:/:/sbin/nologin
EOF
cat > "$root/etc/group" <<'EOF'
root:x:0:root
bin:x:1:root,bin,daemon
daemon:x:2:root,bin,daemon
sys:x:3:root,bin,adm
adm:x:4:root,adm,daemon
tty:x:5:
disk:x:6:root,adm
lp:x:7:lp
kmem:x:9:
wheel:x:10:root
mail:x:12:mail
cron:x:16:cron
audio:x:18:
video:x:27:root
games:x:35:
ntp:x:123:ntp
ping:x:999:
users:x:100:games
nogroup:x:65533:
nobody:x:65534:
EOF
printf 'NAME="podman test image (busybox)"\nID=busybox\n' > "$root/etc/os-release"

# the files build-testimage adds: the tag, with a fixed timestamp (the `run --tz` test reads
# it), and the pause script of the pod tests
echo "$TAG" > "$root/home/podman/testimage-id"
touch --date=@1600000000 "$root/home/podman/testimage-id"
cat > "$root/home/podman/pause" <<'EOF'
#!/bin/sh
#
# Trivial little pause script, used in one of the pod tests
#
echo Confirmed: testimage pause invoked as $0
while :; do
    sleep 0.1
done
EOF
chmod 755 "$root/home/podman/pause"

# podman expects the root directory mode 555 (as the filesystem package of Fedora has it)
chmod 555 "$root"
tar -C "$root" --numeric-owner --owner=0 --group=0 -cf "$dir/rootfs.tar" .
"$PODMAN" import -q \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'WORKDIR /home/podman' \
    --change 'LABEL created_by=test/system/build-testimage' \
    --change "LABEL org.scrun-py.recipe=$RECIPE" \
    --change "LABEL created_at=${TAG:0:4}-${TAG:4:2}-${TAG:6:2}T00:00:00Z" \
    --change 'CMD ["/bin/echo", "This container is intended for podman CI testing"]' \
    "$dir/rootfs.tar" "$IMAGE" >/dev/null
