"""The metric families of cloudnet's processes (prometheus_client), and nothing else: every layer may import this
module to count what it does, and the API renders them (api/metrics.py).

Two registries: SERVER holds what the server process does (API, database, pools, northbound); AGENT holds what a
host agent does (its passes, its metadata proxy, its mdata sockets, its dnsmasq). An agent sends AGENT's samples
in its heartbeat report (`samples()`), and the server exposes them with a `host` label beside its own, so one
scrape of one server sees the whole cloud. (In `cloudnet up` the agent runs in the server's process: two
registries keep its families from mixing with the server's unlabelled ones. A process runs one agent; tests that
run several in one process see them counted together.)

Names follow Prometheus' rules: `cloudnet_` prefix, base units in the name, counters end in `_total`
(prometheus_client adds it), no label of unbounded cardinality (route templates, never raw paths; no ids).
"""

from __future__ import annotations

import math
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

# No `_created` series beside every counter and histogram: they double a scrape, and Prometheus' text format (0.0.4)
# gives them no meaning of their own.
disable_created_metrics()
SERVER = CollectorRegistry(auto_describe=True)
AGENT = CollectorRegistry(auto_describe=True)
# Off (`cloudnet serve --no-metrics`): the hot paths skip their timing (the bench measures the difference).
enabled = True

# Request latencies: 0.5 ms (a pool claim) to 10 s (a bulk create of thousands).
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Passes: kube-proxy's sync buckets, ExponentialBuckets(0.001, 2, 15): 1 ms to ~16 s.
PASS_BUCKETS = tuple(0.001 * 2**i for i in range(15))
# Commit to realised: kube-proxy's network programming buckets start at 0.25 s; ours are mostly faster.
PROGRAMMING_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

# -- server --------------------------------------------------------------------------------------------------------
API_REQUESTS = Counter("cloudnet_api_requests", "API requests answered, by route template and status",
                       ["method", "route", "status"], registry=SERVER)  # fmt: skip
API_DURATION = Histogram("cloudnet_api_request_duration_seconds", "API request latency, by route template",
                         ["method", "route"], buckets=REQUEST_BUCKETS, registry=SERVER)  # fmt: skip
DB_DURATION = Histogram("cloudnet_db_transaction_duration_seconds", "Database transaction time (read or write)",
                        ["kind"], buckets=REQUEST_BUCKETS, registry=SERVER)  # fmt: skip
DB_ERRORS = Counter("cloudnet_db_transaction_errors", "Database transactions that failed in the database",
                    ["kind"], registry=SERVER)  # fmt: skip
PROGRAMMING = Histogram("cloudnet_network_programming_duration_seconds",
                        "A port's last committed change to the agent's report that realised it (ACTIVE)",
                        buckets=PROGRAMMING_BUCKETS, registry=SERVER)  # fmt: skip
POOL_CLAIMS = Counter("cloudnet_pool_claims", "Port pool claims: hit (a ready port), miss (filled while claiming), "
                      "failed (none to be had)", ["result"], registry=SERVER)  # fmt: skip
POOL_REFILLS = Counter("cloudnet_pool_refills", "Port pool refills, by what started them", ["trigger"],
                       registry=SERVER)  # fmt: skip
POOL_REFILL_PORTS = Counter("cloudnet_pool_refill_ports", "Ports made by port pool refills", registry=SERVER)
NB_DURATION = Histogram("cloudnet_northbound_pass_duration_seconds", "OVN northbound sync passes",
                        buckets=PASS_BUCKETS, registry=SERVER)  # fmt: skip
OVN_CENTRAL_RESTARTS = Counter("cloudnet_ovn_central_restarts",
                               "OVN's central daemons this server started (ovn-northd, the NB and SB databases) found "
                               "running again under a new pid", ["daemon"], registry=SERVER)  # fmt: skip
NB_ROWS = Counter("cloudnet_northbound_rows_written", "OVN northbound rows written (inserted, updated, deleted)",
                  registry=SERVER)  # fmt: skip
# On OVN the forwards and security groups are NB rows, written by the server holding NB's lock (not by the agents):
# its counts of them, as the Linux dataplane's agents count their nftables elements.
NB_FORWARD_ELEMENTS = Gauge("cloudnet_northbound_forward_elements", "Load-balancer VIPs of the forwards in OVN's "
                            "northbound database, as this server last wrote it", registry=SERVER)  # fmt: skip
NB_FIREWALL_ELEMENTS = Gauge("cloudnet_northbound_firewall_elements", "ACLs and address-set addresses of the security "
                             "groups in OVN's northbound database, as this server last wrote it",
                             registry=SERVER)  # fmt: skip

# -- agent (sent in the host's report; the server adds `host`) ----------------------------------------------------
PASS_DURATION = Histogram("cloudnet_agent_pass_duration_seconds", "Agent reconcile passes", ["type"],
                          buckets=PASS_BUCKETS, registry=AGENT)  # fmt: skip
PASSES = Counter("cloudnet_agent_passes", "Agent reconcile passes, by type and result", ["type", "result"],
                 registry=AGENT)  # fmt: skip
OBJECTS_APPLIED = Counter("cloudnet_agent_objects_applied", "Dataplane objects applied, by kind", ["kind"],
                          registry=AGENT)  # fmt: skip
OBJECTS_FAILED = Gauge("cloudnet_agent_objects_failed", "Dataplane objects whose last attempt failed, by kind",
                       ["kind"], registry=AGENT)  # fmt: skip
LAST_PASS = Gauge("cloudnet_agent_last_successful_pass_timestamp_seconds", "When the last pass succeeded (Unix time)",
                  registry=AGENT)  # fmt: skip
METADATA_REQUESTS = Counter("cloudnet_metadata_requests", "Guests' metadata requests (169.254.169.254), by tree and "
                            "status (429: over the rate limit; tree none: a connection refused, too many from its "
                            "source)", ["tree", "status"], registry=AGENT)  # fmt: skip
METADATA_DURATION = Histogram("cloudnet_metadata_request_duration_seconds", "Guests' metadata request latency",
                              ["tree"], buckets=REQUEST_BUCKETS, registry=AGENT)  # fmt: skip
MDATA_REQUESTS = Counter("cloudnet_mdata_requests", "SmartOS mdata socket requests, by command and result",
                         ["command", "result"], registry=AGENT)  # fmt: skip
DNSMASQ_RESTARTS = Counter("cloudnet_dnsmasq_restarts", "dnsmasq servers found dead and restarted", registry=AGENT)
OVN_RESTARTS = Counter("cloudnet_ovn_daemon_restarts", "This chassis' OVN daemons (ovn-controller, ovs-vswitchd) found "
                       "running again under a new pid", ["daemon"], registry=AGENT)  # fmt: skip
FORWARD_ELEMENTS = Gauge("cloudnet_forward_elements", "nftables map elements of the forwards this host's routers NAT "
                         "(Linux dataplane)", registry=AGENT)  # fmt: skip
FIREWALL_ELEMENTS = Gauge("cloudnet_firewall_elements", "nftables set and map elements of this host's security groups "
                          "(Linux dataplane)", registry=AGENT)  # fmt: skip

_AGENT_METRICS = [PASS_DURATION, PASSES, OBJECTS_APPLIED, OBJECTS_FAILED, LAST_PASS, METADATA_REQUESTS,
                  METADATA_DURATION, MDATA_REQUESTS, DNSMASQ_RESTARTS, OVN_RESTARTS, FORWARD_ELEMENTS,
                  FIREWALL_ELEMENTS]  # fmt: skip
# What an agent may send for each family (the server takes nothing else): name -> (type, label names).
AGENT_FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    m._name: (m._type, tuple(m._labelnames)) for m in _AGENT_METRICS
}


def samples(registry: CollectorRegistry = AGENT) -> list[list[Any]]:
    """The registry's samples as JSON: [family, sample name, labels, value], without `_created` ones."""
    out: list[list[Any]] = []
    for family in registry.collect():
        for s in family.samples:
            if not s.name.endswith("_created") and math.isfinite(s.value):
                out.append([family.name, s.name, s.labels, s.value])
    return out


def kind_of(key: str) -> str:
    """A dataplane object's kind from its step key (`instance:<id>` -> `instance`): a bounded label."""
    return key.partition(":")[0]
