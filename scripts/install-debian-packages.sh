#!/usr/bin/env bash
# Install the Debian packages cloudnet needs, only those missing (so repeated runs cost nothing): the arguments
# (names common to every release this knows) and this release's own. A release it does not know stops it, in one
# line, before anything is installed: its package names and component versions are unchecked.
set -euo pipefail
. "${OS_RELEASE:-/etc/os-release}" 2>/dev/null || true
case "${ID:-}:${VERSION_CODENAME:-}" in
debian:bookworm)
    release=() # docker.io carries the docker command; podman 4 speaks CNI (cloudnet-cni)
    ;;
debian:trixie)
    # The docker command moved to docker-cli; podman 5 speaks only netavark (cloudnet-netavark), so CNI is tested
    # through containerd's ctr (containerd comes with docker.io on both).
    release=(docker-cli)
    ;;
*)
    echo "cloudnet installs on Debian 12 (bookworm) and 13 (trixie); this is ${PRETTY_NAME:-an unknown system} (${OS_RELEASE:-/etc/os-release})" >&2
    exit 1
    ;;
esac
missing=()
for pkg in "$@" "${release[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "cloudnet needs these Debian packages: ${missing[*]} (run as root, or install them first)" >&2
    exit 1
fi
echo "installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
