"""Where an instance's SmartOS metadata socket lives (RFD 69): the host agent serves it at
<state-dir>/zonecontrol/<instance uuid>/metadata.sock, and a runtime mounts that directory into the instance
(cloudnet-oci-hook for podman). Shared so that both name the same path."""

from __future__ import annotations

import uuid
from typing import Any

SOCKET_NAME = "metadata.sock"
DIR_NAME = "zonecontrol"


def is_uuid(value: Any) -> bool:
    # Directory names come from instance ids: only ever a UUID, never a path.
    try:
        return str(uuid.UUID(value)) == value
    except (ValueError, TypeError, AttributeError):
        return False
