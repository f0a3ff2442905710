"""Database schema (SQLAlchemy Core). Migrations in store/migrations mirror it.

Invariants the database itself enforces, so that no code path or concurrent writer can break them:
- one address per subnet (`ip_allocations` primary key);
- one MAC per network (`uq_ports_network_mac`);
- one VLAN/flat segment per physical network (`networks.segment_key`);
- one default security group per project (`security_groups.default_for_project`);
- a gap-free global revision (`revision_counter`, bumped inside every writing transaction).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

ID = String(36)
PROJECT = String(255)
NAME = String(255)


def _standard() -> list[Column]:
    """Neutron's standard attributes, on every resource table."""
    return [
        Column("id", ID, primary_key=True),
        Column("project_id", PROJECT, nullable=False, index=True),
        Column("name", NAME, nullable=False, default=""),
        Column("description", String(255), nullable=False, default=""),
        Column("created_at", DateTime(timezone=True), nullable=False),
        Column("updated_at", DateTime(timezone=True), nullable=False),
        Column("revision_number", BigInteger, nullable=False, default=0),
    ]


revision_counter = Table(
    "revision_counter",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("value", BigInteger, nullable=False),
)

events = Table(
    "events",
    metadata,
    Column("revision", BigInteger, primary_key=True, autoincrement=False),
    Column("resource", String(64), nullable=False),
    Column("resource_id", String(255), nullable=False),
    Column("operation", String(16), nullable=False),
    Column("project_id", PROJECT, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # (followers of the stream only: store/events.py)
    Column("type", String(64), nullable=True),
    Column("request_id", String(64), nullable=True),
    Column("detail", String(1000), nullable=True),
)

networks = Table(
    "networks",
    metadata,
    *_standard(),
    Column("admin_state_up", Boolean, nullable=False, default=True),
    Column("shared", Boolean, nullable=False, default=False),
    Column("mtu", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("router_external", Boolean, nullable=False, default=False),
    Column("network_type", String(16), nullable=False),
    Column("physical_network", String(64), nullable=True),
    Column("segmentation_id", Integer, nullable=True),
    # "vlan:physnet1:100" / "flat:physnet1"; NULL for local networks. Unique: one owner per segment.
    Column("segment_key", String(128), nullable=True, unique=True),
    # cloudnet extension: ipv4.nat.address, ipv6.nat.address, user.* (LXD's network config keys).
    Column("config", JSON, nullable=False, default=dict),
    # cloudnet:routes of an external network: ranges routed to the uplink from outside (LXD ipv4.routes).
    Column("routes", JSON, nullable=False, default=list),
    # What its new ports get when they say nothing (Neutron's port-security extension on networks).
    Column("port_security_enabled", Boolean, nullable=False, default=True),
    # Its QoS policy (store/tables_qos.py), which its ports without one of their own follow.
    Column("qos_policy_id", ID, nullable=True, index=True),
    # Neutron's network_availability_zone: the zones asked for at create ([] none), read-only after.
    Column("availability_zone_hints", JSON, nullable=False, default=list),
)

subnets = Table(
    "subnets",
    metadata,
    *_standard(),
    Column("network_id", ID, ForeignKey("networks.id"), nullable=False, index=True),
    Column("ip_version", Integer, nullable=False),
    Column("cidr", String(64), nullable=False),
    Column("gateway_ip", String(64), nullable=True),
    Column("allocation_pools", JSON, nullable=False),
    Column("dns_nameservers", JSON, nullable=False),
    Column("host_routes", JSON, nullable=False),
    Column("enable_dhcp", Boolean, nullable=False, default=True),
    Column("ipv6_ra_mode", String(32), nullable=True),
    Column("ipv6_address_mode", String(32), nullable=True),
    # The pool its prefix came from (tables_subnetpools.py holds the allocation).
    Column("subnetpool_id", ID, nullable=True, index=True),
)

ports = Table(
    "ports",
    metadata,
    *_standard(),
    Column("network_id", ID, ForeignKey("networks.id"), nullable=False),
    Column("mac_address", String(32), nullable=False),
    Column("admin_state_up", Boolean, nullable=False, default=True),
    Column("status", String(16), nullable=False),
    Column("device_id", String(255), nullable=False, default="", index=True),
    Column("device_owner", String(255), nullable=False, default=""),
    Column("port_security_enabled", Boolean, nullable=False, default=True),
    Column("vnic_type", String(32), nullable=False, default="normal"),
    Column("host_id", String(255), nullable=False, default="", index=True),
    Column("profile", JSON, nullable=False),
    Column("vif_type", String(32), nullable=False, default="unbound"),
    Column("vif_details", JSON, nullable=False),
    Column("qos_policy_id", ID, nullable=True, index=True),  # (tables_qos.py; a port's own wins over its network's)
    UniqueConstraint("network_id", "mac_address", name="uq_ports_network_mac"),
)

ip_allocations = Table(
    "ip_allocations",
    metadata,
    Column("subnet_id", ID, ForeignKey("subnets.id"), nullable=False),
    Column("ip_address", String(64), nullable=False),
    Column("network_id", ID, nullable=False),
    Column("port_id", ID, ForeignKey("ports.id", ondelete="CASCADE"), nullable=False, index=True),
    PrimaryKeyConstraint("subnet_id", "ip_address"),
)

security_groups = Table(
    "security_groups",
    metadata,
    *_standard(),
    Column("stateful", Boolean, nullable=False, default=True),
    # The project id when this is the project's default group, else NULL; unique so that two
    # concurrent first requests of a project cannot both create one.
    Column("default_for_project", PROJECT, nullable=True, unique=True),
)

security_group_rules = Table(
    "security_group_rules",
    metadata,
    Column("id", ID, primary_key=True),
    Column("project_id", PROJECT, nullable=False, index=True),
    Column("description", String(255), nullable=False, default=""),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("revision_number", BigInteger, nullable=False, default=0),
    Column(
        "security_group_id",
        ID,
        ForeignKey("security_groups.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    Column("direction", String(16), nullable=False),
    Column("ethertype", String(8), nullable=False),
    Column("protocol", String(40), nullable=True),
    Column("port_range_min", Integer, nullable=True),
    Column("port_range_max", Integer, nullable=True),
    Column("remote_ip_prefix", String(64), nullable=True),
    Column("remote_group_id", ID, ForeignKey("security_groups.id"), nullable=True),
)

port_security_groups = Table(
    "port_security_groups",
    metadata,
    Column("port_id", ID, ForeignKey("ports.id", ondelete="CASCADE"), nullable=False),
    Column("security_group_id", ID, ForeignKey("security_groups.id"), nullable=False),
    PrimaryKeyConstraint("port_id", "security_group_id"),
)

# Neutron's allowed address pairs: more (IP or CIDR, MAC) a port may send from. The MAC is stored resolved (the
# port's own when the pair gave none), as Neutron stores it.
allowed_address_pairs = Table(
    "allowed_address_pairs",
    metadata,
    Column("port_id", ID, ForeignKey("ports.id", ondelete="CASCADE"), nullable=False),
    Column("mac_address", String(32), nullable=False),
    Column("ip_address", String(64), nullable=False),
    PrimaryKeyConstraint("port_id", "mac_address", "ip_address"),
)

routers = Table(
    "routers",
    metadata,
    *_standard(),
    Column("admin_state_up", Boolean, nullable=False, default=True),
    Column("status", String(16), nullable=False),
    Column("gw_port_id", ID, ForeignKey("ports.id"), nullable=True),
    Column("enable_snat", Boolean, nullable=False, default=True),
    # extraroute: [{"destination": cidr, "nexthop": ip}], checked against the router's subnets
    Column("routes", JSON, nullable=False, default=list),
    Column("availability_zone_hints", JSON, nullable=False, default=list),  # (router_availability_zone)
)

tags = Table(
    "tags",
    metadata,
    Column("resource_id", ID, nullable=False),
    Column("tag", String(255), nullable=False),
    PrimaryKeyConstraint("resource_id", "tag"),
)

hosts = Table(
    "hosts",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("agent_version", String(64), nullable=False, default=""),
    Column("heartbeat_at", DateTime(timezone=True), nullable=False),
    # Set when the heartbeat timeout has passed and the host's ports were reported DOWN.
    Column("dead_since", DateTime(timezone=True), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("revision_number", BigInteger, nullable=False, default=0),
    # What the agent reports about itself: uplinks, later SR-IOV inventory.
    Column("report", JSON, nullable=False),
    # The zone its agent reports (`cloudnet agent --availability-zone`, Neutron's agents' availability_zone).
    Column("availability_zone", String(255), nullable=False, default="nova"),
)

# Join tokens (`cloudnet host join-token`): single use, short-lived, for one host name; the secret's SHA-256 only.
join_tokens = Table(
    "join_tokens",
    metadata,
    Column("id", String(12), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("secret_hash", String(64), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("used_at", DateTime(timezone=True), nullable=True),
)

# Every host certificate the CA signed (serial in hex): a client certificate is accepted only while its row is here
# unrevoked (`cloudnet host remove` revokes a host's), so this is the revocation list and an allow list in one.
host_certificates = Table(
    "host_certificates",
    metadata,
    Column("serial", String(40), primary_key=True),
    Column("host", String(255), nullable=False, index=True),
    Column("issued_at", DateTime(timezone=True), nullable=False),
    Column("not_after", DateTime(timezone=True), nullable=False),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
)

# A network forward is also a floating IP (services/forwards/floating_ips.py): one external address, whole or per port.
forwards = Table(
    "forwards",
    metadata,
    Column("id", ID, primary_key=True),
    # The network its targets are on; NULL while it targets nothing (a floating IP not associated to any port).
    Column("network_id", ID, ForeignKey("networks.id"), nullable=True, index=True),
    # The external network its address is taken from (Neutron's floating_network_id); NULL for forwards an
    # earlier version made, which is then their network's uplink.
    Column("floating_network_id", ID, ForeignKey("networks.id"), nullable=True, index=True),
    # Canonical text form; unique: one listen address belongs to one network.
    Column("listen_address", String(64), nullable=False, unique=True),
    Column("description", String(255), nullable=False, default=""),
    Column("config", JSON, nullable=False),
    Column("ports", JSON, nullable=False),
    Column("project_id", PROJECT, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("revision_number", BigInteger, nullable=False, default=0),
    # The face that made it, which decides what its targets' ports going does to it
    # (services/forwards/forward_targets.py):
    # "forward" (the forwards API: it keeps them, as LXD) or "floatingip" (Neutron's: it is disassociated).
    Column("origin", String(16), nullable=False, default="forward", server_default="forward"),
)

instances = Table(
    "instances",
    metadata,
    *_standard(),
    Column("hostname", String(255), nullable=False, default=""),
    Column("host", String(255), nullable=False, default="", index=True),
    Column("netns", String(4096), nullable=False, default=""),
    Column("user_data", Text, nullable=True),
    Column("meta", JSON, nullable=False),
    Column("ssh_keys", JSON, nullable=False),
    # IMDSv2: "optional" (default) or "required" (a session token on every metadata request).
    Column("metadata_tokens", String(16), nullable=False, default="optional"),
    # Metadata the platform keeps about the instance (SmartOS internal namespaces), not the customer's.
    Column("internal_meta", JSON, nullable=False, default=dict),
    # The encrypted admin password a guest may POST once to /openstack/.../password.
    Column("password", Text, nullable=True),
    # The runtime takes the plugged device out of the namespace cloudnet provided (Docker's Join): the host end
    # on the bridge is then the port's device, and the agent never looks for (or re-creates) the other end.
    Column("handoff", Boolean, nullable=False, default=False),
    # "container" (a network namespace, `netns`) or "vm" (a tap device per NIC, opened by a VMM; netns "").
    Column("kind", String(16), nullable=False, default="container"),
)

instance_ports = Table(
    "instance_ports",
    metadata,
    Column("instance_id", ID, ForeignKey("instances.id", ondelete="CASCADE"), nullable=False),
    Column("port_id", ID, ForeignKey("ports.id", ondelete="CASCADE"), nullable=False, unique=True),
    # Order of the instance's interfaces: position 0 is eth0.
    Column("position", Integer, nullable=False),
    # Its device's name inside the instance's namespace; NULL: eth<position>.
    Column("ifname", String(15), nullable=True),
    # Ports the instance created (from a `network` net) go away with it; given ones are only unbound.
    Column("created_by_instance", Boolean, nullable=False),
    PrimaryKeyConstraint("instance_id", "port_id"),
)

# Port pools (Kuryr-style): ready ports per (host, project, network), with their sizing. NULL sizing
# columns mean "the server's default" (ServerConfig.pool_*), so a changed default applies to every pool.
port_pools = Table(
    "port_pools",
    metadata,
    Column("id", ID, primary_key=True),
    Column("host", String(255), nullable=False),
    Column("project_id", PROJECT, nullable=False),
    Column("network_id", ID, ForeignKey("networks.id", ondelete="CASCADE"), nullable=False, index=True),
    # The security groups (sorted ids) refills give new ports: the bucket of the latest claim.
    Column("security_groups", JSON, nullable=False),
    Column("min", Integer, nullable=True),
    Column("max", Integer, nullable=True),
    Column("batch", Integer, nullable=True),
    Column("ttl", Integer, nullable=True),
    Column("update_interval", Integer, nullable=True),
    Column("last_refill", DateTime(timezone=True), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("revision_number", BigInteger, nullable=False, default=0),
    UniqueConstraint("host", "project_id", "network_id", name="uq_port_pools_host_project_id_network_id"),
)

# Membership of a port in its pool (the port also carries the tag cloudnet.pool=<pool id>). A pool port
# is ready while its device_owner is compute:cloudnet-pool; idle_since is when it last became ready.
pool_ports = Table(
    "pool_ports",
    metadata,
    Column("port_id", ID, ForeignKey("ports.id", ondelete="CASCADE"), primary_key=True),
    Column("pool_id", ID, ForeignKey("port_pools.id", ondelete="CASCADE"), nullable=False),
    Column("idle_since", DateTime(timezone=True), nullable=True),
)

# SR-IOV: which VF (host, PCI slot) a direct port holds. Unique per VF and per port, so two instances
# can never get one VF, whatever runs concurrently.
sriov_reservations = Table(
    "sriov_reservations",
    metadata,
    Column("host", String(255), nullable=False),
    Column("pci_slot", String(32), nullable=False),
    Column("port_id", ID, ForeignKey("ports.id", ondelete="CASCADE"), nullable=False, unique=True),
    Column("pf", String(64), nullable=False),
    Column("vf_index", Integer, nullable=False),
    Column("physical_network", String(64), nullable=False),
    Column("pci_vendor_info", String(16), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("host", "pci_slot"),
)

# A project's limit of one resource (NULL: the server's default). On PostgreSQL a create locks its (project,
# resource) row until commit, so concurrent creates count one after another (services/quotas.py).
quotas = Table(
    "quotas",
    metadata,
    Column("project_id", PROJECT, nullable=False),
    Column("resource", String(64), nullable=False),
    Column("limit", Integer, nullable=True),
    PrimaryKeyConstraint("project_id", "resource"),
)

Index("ix_ports_network_id_device_owner", ports.c.network_id, ports.c.device_owner)
Index("ix_ip_allocations_network_id_ip_address", ip_allocations.c.network_id, ip_allocations.c.ip_address)
Index("ix_tags_tag", tags.c.tag)
# A member follows the log of their own project (services/events.py) without reading everyone's events.
Index("ix_events_project_id_revision", events.c.project_id, events.c.revision)
# A group's members without reading the table: every host's desired state gathers its remote groups' members.
Index("ix_port_security_groups_security_group_id_port_id", port_security_groups.c.security_group_id,
      port_security_groups.c.port_id)  # fmt: skip
# A claim walks one pool's ports in idle order and stops at the first ready one of its bucket.
Index("ix_pool_ports_pool_id_idle_since", pool_ports.c.pool_id, pool_ports.c.idle_since)

__all__ = [
    "allowed_address_pairs",
    "events",
    "forwards",
    "host_certificates",
    "hosts",
    "instance_ports",
    "instances",
    "ip_allocations",
    "join_tokens",
    "metadata",
    "networks",
    "pool_ports",
    "port_pools",
    "port_security_groups",
    "ports",
    "quotas",
    "revision_counter",
    "routers",
    "security_group_rules",
    "security_groups",
    "sriov_reservations",
    "subnets",
    "tags",
]
