#!/usr/bin/env bash
# A throwaway Debian root file system for trying the two commands on another release than this machine's, as the
# README's quick start has them (a bare system plus git and make). The suite needs this host's kernel features, so
# the root is entered with chroot over bind mounts of /proc, /sys (with the cgroups), /dev and /run; WORK (default
# /work) is bound in too, so a checkout there is the same path inside.
#
#   scripts/debian-root.sh make DIR [SUITE]     mmdebstrap SUITE (default: stable) into DIR, with git and make
#   scripts/debian-root.sh run DIR CMD...       CMD as root inside DIR (mounts made on first use, kept)
#   scripts/debian-root.sh umount DIR           undo the mounts (before removing DIR)
set -euo pipefail
WORK=${WORK:-/work}

mounted() { grep -qs " $(realpath "$1") " /proc/self/mountinfo; }

mounts() {
    local root=$1
    mounted "$root/proc" || mount -t proc proc "$root/proc"
    for dir in sys dev run; do
        mounted "$root/$dir" || { mount --rbind "/$dir" "$root/$dir" && mount --make-rslave "$root/$dir"; }
    done
    mkdir -p "$root$WORK"
    mounted "$root$WORK" || mount --bind "$WORK" "$root$WORK"
    cp -L /etc/resolv.conf "$root/etc/resolv.conf"
}

case ${1:-} in
make)
    [ $# -ge 2 ] || { echo "usage: $0 make DIR [SUITE]" >&2; exit 2; }
    command -v mmdebstrap >/dev/null || apt-get install -y -qq mmdebstrap >/dev/null
    mmdebstrap --include=git,make,ca-certificates "${3:-stable}" "$2"
    # Packages' services are not started inside (they would run beside this host's; the suite starts its own).
    printf '#!/bin/sh\nexit 101\n' > "$2/usr/sbin/policy-rc.d" && chmod +x "$2/usr/sbin/policy-rc.d"
    ;;
run)
    [ $# -ge 3 ] || { echo "usage: $0 run DIR CMD..." >&2; exit 2; }
    root=$2; shift 2
    mounts "$root"
    # In a mount namespace of its own with the root bound onto itself: `ip -n`/`ip netns exec` remount / as a slave,
    # which fails ("mount --make-rslave /": Invalid argument) where / is no mount point, as a chroot's directory is not.
    exec unshare --mount -- /bin/sh -c 'mount --rbind "$0" "$0" && exec chroot "$0" "$@"' "$root" \
        /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
    ;;
umount)
    [ $# -eq 2 ] || { echo "usage: $0 umount DIR" >&2; exit 2; }
    for dir in "$WORK" /run /dev /sys /proc; do
        mounted "$2$dir" && umount -R -l "$2$dir"
    done
    true
    ;;
*)
    echo "usage: $0 make DIR [SUITE] | run DIR CMD... | umount DIR" >&2
    exit 2
    ;;
esac
