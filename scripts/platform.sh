#!/usr/bin/env bash
# One line saying what `make run` / `make test` found: the Debian release and the versions of the components
# whose behaviour differs between releases (podman and its network backend, OVN, PostgreSQL, QEMU), and the
# accelerator the VM tests' QEMU last chose here (tests/support/qemu.py probes KVM once and caches the answer).
set -uo pipefail
. /etc/os-release 2>/dev/null || true
version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null | sed 's/^[0-9]*://; s/[+~-].*//' || true; }
podman=$(version podman)
case $podman in
'') backend= ;;
[0-4].*) backend=" (CNI: cloudnet-cni)" ;;
*) backend=" (netavark: cloudnet-netavark)" ;;
esac
pg=$(ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -1)
qemu=$(version qemu-system-x86)
probe=$(ls -t "${CLOUDNET_TEST_CACHE:-/var/cache/cloudnet-tests}"/accel/*.json 2>/dev/null | head -1)
if [ ! -e /dev/kvm ]; then accel="tcg: no /dev/kvm"
elif [ -n "$probe" ]; then accel="$(sed -n 's/.*"name": "\([a-z]*\)".*/\1/p' "$probe") as last probed"
else accel="KVM not probed yet"; fi
echo "cloudnet on ${NAME:-an unknown system} ${VERSION:-}:" \
    "podman ${podman:-none}${backend}, OVN $(version ovn-common || true), OVS $(version openvswitch-common)," \
    "PostgreSQL ${pg:-none}, containerd $(version containerd), cloud-init $(version cloud-init)," \
    "QEMU ${qemu:-none} (${accel})"
