"""Migration 0020 on a database that has networks: they keep their rows with no QoS policy, the QoS tables take
policies and rules (one rule of a type per direction, held by the database), and a downgrade drops all of it. Both
backends."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from cloudnet.store.db import Store
from cloudnet.store.migrate import upgrade
from tests.support import migrations

POLICY = ("INSERT INTO qos_policies (id, project_id, name, description, created_at, updated_at, revision_number, "
          "shared, is_default) VALUES ('q1', 'p', 'q', '', :now, :now, 0, false, false)")  # fmt: skip
RULE = ("INSERT INTO qos_rules (id, qos_policy_id, type, direction, max_kbps, created_at) "
        "VALUES (:id, 'q1', 'bandwidth_limit', 'egress', 1000, :now)")  # fmt: skip


def test_networks_keep_no_policy_and_a_second_rule_of_a_direction_is_refused(old_store: Store) -> None:
    upgrade(old_store, "0015")
    with old_store.engine.begin() as conn:
        migrations.network(conn, "n1", {"port_security_enabled": True})
    upgrade(old_store)
    with old_store.engine.begin() as conn:
        assert conn.execute(text("SELECT qos_policy_id FROM networks WHERE id = 'n1'")).scalar() is None
        conn.execute(text(POLICY), {"now": migrations.NOW})
        conn.execute(text(RULE), {"id": "r1", "now": migrations.NOW})
    with pytest.raises(IntegrityError), old_store.engine.begin() as conn:
        conn.execute(text(RULE), {"id": "r2", "now": migrations.NOW})
    migrations.downgrade(old_store, "0015")
    with old_store.engine.connect() as conn:
        tables = set(inspect(conn).get_table_names())
        assert not {"qos_policies", "qos_rules"} & tables
        assert "qos_policy_id" not in {c["name"] for c in inspect(conn).get_columns("networks")}
        assert conn.execute(text("SELECT count(*) FROM networks")).scalar() == 1
    old_store.dispose()
