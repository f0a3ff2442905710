#!/usr/bin/env bash
# One line saying what `make run` / `make test` found: the Debian release and the versions of the components
# whose behaviour differs between releases (podman and its network backend, OVN, PostgreSQL).
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
echo "cloudnet on ${NAME:-an unknown system} ${VERSION:-}:" \
    "podman ${podman:-none}${backend}, OVN $(version ovn-common || true), OVS $(version openvswitch-common)," \
    "PostgreSQL ${pg:-none}, containerd $(version containerd), cloud-init $(version cloud-init)"
