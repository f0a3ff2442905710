"""The whole schema: tables.py's core tables and each area's own module, on one MetaData.

Import `metadata` from here wherever it must be complete (migrations, emptying a test database); an area's module
registers its tables when imported, and tables.py stays the core's.
"""

from __future__ import annotations

from cloudnet.store import tables_qos, tables_rbac, tables_subnetpools, tables_trunks
from cloudnet.store.tables import metadata

AREAS = (tables_qos, tables_rbac, tables_subnetpools, tables_trunks)

__all__ = ["AREAS", "metadata"]
