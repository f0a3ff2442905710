#!/usr/bin/env bash
# Fetch openstacksdk's pinned, hash-checked source distribution (scripts/openstacksdk-tests.lock) and unpack it
# as DEST/openstacksdk-VERSION (once: a second run finds it there). Usage: fetch-openstacksdk-tests.sh PYTHON DEST
set -euo pipefail
python=$1
dest=$2
lock=$(dirname "$0")/openstacksdk-tests.lock
version=$(sed -n 's/^openstacksdk==\([^ ]*\).*/\1/p' "$lock")
[ -f "$dest/openstacksdk-$version/openstack/tests/functional/base.py" ] && exit 0
mkdir -p "$dest"
# --no-build-isolation: pip reads the sdist's metadata with the venv's own pbr/setuptools, fetching nothing else.
"$python" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: --no-build-isolation \
    --require-hashes -r "$lock" -d "$dest"
tar -xzf "$dest/openstacksdk-$version.tar.gz" -C "$dest" "openstacksdk-$version/openstack"
rm -f "$dest/openstacksdk-$version.tar.gz"
