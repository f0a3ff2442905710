"""An instance's config drive, as Nova builds it (reference/vms-and-operations.md §A3): an ISO 9660 image labelled
`config-2` that cloud-init's ConfigDrive datasource finds by its label and reads like the metadata service.

It holds the OpenStack tree at every dated version and `latest` (`meta_data.json`, `user_data`, `vendor_data.json`,
`network_data.json`, `vendor_data2.json`, as each version has them) and the EC2 tree (`meta-data.json`,
`user-data`); every file is what the metadata API answers for the instance, rendered by metadata/trees.py from the
same view (metadata/view.py), so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

import orjson

from cloudnet.errors import Conflict, not_found
from cloudnet.metadata import iso9660, trees
from cloudnet.metadata.model import InstanceView, Settings
from cloudnet.metadata.view import load_view
from cloudnet.services import common
from cloudnet.services.context import Context
from cloudnet.store import tables as t
from cloudnet.store.db import Store

LABEL = "config-2"
# Nova's [api] config_drive_skip_versions leaves the older EC2 versions off a drive by default; cloud-init reads
# ec2/latest only.
EC2_VERSIONS = (trees.EC2_VERSIONS[-1], "latest")
# What the image may hold. User data at its limit (65,535 characters, 256 KiB in UTF-8 at worst) in its 13 copies is
# 3.25 MiB, which fits several times over; but an owner may add metadata items one by one without a count limit, and
# meta_data.json carries them in 11 versions: rendering stops at this bound, before an image (a second copy) is made.
MAX_CONTENT = 16 << 20


def files(view: InstanceView, settings: Settings, limit: int = MAX_CONTENT) -> dict[str, bytes]:
    """The drive's files: path (relative, POSIX) -> content; ConfigDriveTooLarge past `limit` bytes in all."""
    out: dict[str, bytes] = {}
    size = 0

    def add(path: str, data: bytes) -> None:
        nonlocal size
        size += len(data)
        if size > limit:
            raise Conflict(
                f"The config drive of instance {view.id} would hold more than the {limit >> 20} MiB a config drive "
                "may: remove metadata items or shorten its user data.",
                type="ConfigDriveTooLarge",
            )
        out[path] = data

    for version in (*trees.OPENSTACK_VERSIONS, "latest"):
        listing = trees.render(view, settings, f"openstack/{version}")
        for name in listing.body.decode().splitlines():
            # No password: the guest posts its own after boot (Nova's drive has none either).
            if name != trees.PASSWORD:
                path = f"openstack/{version}/{name}"
                add(path, trees.render(view, settings, path).payload())  # a fresh random_seed in each meta_data
    for version in EC2_VERSIONS:
        dated = trees.EC2_VERSIONS[-1] if version == "latest" else version
        meta: dict[str, Any] = trees.ec2_meta_data(view, settings, dated, remote_ip=None)
        add(f"ec2/{version}/meta-data.json", orjson.dumps(meta))
        if view.user_data is not None:
            add(f"ec2/{version}/user-data", view.user_data)
    return out


def config_drive(store: Store, ctx: Context, settings: Settings, instance_id: str) -> bytes:
    """The image of the instance's drive, for its owner or an admin (anyone else: not found, as the instance)."""
    with store.read(snapshot=True) as conn:
        common.get_row(conn, t.instances, "instance", instance_id, ctx)
        loaded = load_view(conn, instance_id)
    if loaded is None:  # (cannot happen in one snapshot, but a rule is not an assert)
        raise not_found("instance", instance_id)
    return iso9660.image(LABEL, files(loaded[0], settings))
