"""Where an instance's SmartOS metadata channel lives (RFD 69), shared by the agent that serves it and the tools
that point a runtime at it (cloudnet-oci-hook, `cloudnet instance qemu-args`), so that all name the same path.

- A container (zone-like) instance: a listening socket at <state-dir>/zonecontrol/<uuid>/metadata.sock, whose
  directory a runtime bind-mounts read-only into the instance.
- A VM instance: its second serial port. The agent listens at <state-dir>/vmserial/<uuid>/ttyb and the VMM's
  chardev connects to it (agent/metadata/mdata_serial says why this way round; wire/mdata_serial gives QEMU's
  arguments)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

SOCKET_NAME = "metadata.sock"
DIR_NAME = "zonecontrol"
SERIAL_SOCKET_NAME = "ttyb"  # as SmartOS names a KVM guest's metadata port (vm.ttyb)
SERIAL_DIR_NAME = "vmserial"


def is_uuid(value: Any) -> bool:
    # Directory names come from instance ids: only ever a UUID, never a path.
    try:
        return str(uuid.UUID(value)) == value
    except (ValueError, TypeError, AttributeError):
        return False


def zone_socket(state_dir: Path, instance_id: str) -> Path:
    """The metadata socket of a container instance."""
    return _under(state_dir, DIR_NAME, instance_id) / SOCKET_NAME


def serial_socket(state_dir: Path, instance_id: str) -> Path:
    """The socket a VM instance's VMM connects its second serial port to."""
    return _under(state_dir, SERIAL_DIR_NAME, instance_id) / SERIAL_SOCKET_NAME


def _under(state_dir: Path, kind: str, instance_id: str) -> Path:
    if not is_uuid(instance_id):
        raise ValueError(f"not an instance id: {instance_id!r}")
    return Path(state_dir) / kind / instance_id
