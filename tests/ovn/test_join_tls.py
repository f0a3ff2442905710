"""A second host joins an OVN cloud with a join token, as an operator does it: on host A `cloudnet up --tls ...`, then
`cloudnet host join-token B`; on host B `cloudnet agent --join https://A:9696 TOKEN` and nothing else about the
cloud (no SB URL, no metadata URL, no copied secret, no admin token): its certificate is its credential. An instance
on B goes ACTIVE and reads its metadata through B's localport; B's agent restarts without the token, which is spent."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import httpx

from cloudnet.agent import join
from cloudnet.dataplane.kernel import netns
from cloudnet.dataplane.ovn import veth
from cloudnet.pki import tls, x509
from tests.ovn.test_join import (  # noqa: F401 (hosts: the fixture)
    AGENT_IP,
    API_PORT,
    METADATA_PORT,
    METADATA_URL,
    SERVER_IP,
    Hosts,
    _active,
    _alive,
    _listening,
    hosts,
)
from tests.support.cloud import ns_run
from tests.support.ovn import UNDERLAY, UNDERLAY_PORT
from tests.support.process import CLOUDNET
from tests.support.tls import foreign_cert


def _serving(h: Hosts, ca: Path) -> bool:
    if not ca.exists():
        return False
    h.verify = tls.client_context(ca)
    try:
        return h.api("GET", "/hosts").status_code == 200
    except httpx.TransportError:  # (not serving yet)
        return False


def up_tls(h: Hosts) -> Path:
    """Host A's `cloudnet up --tls` (API over HTTPS, OVN's databases, A's chassis); its state dir once A's agent is
    alive."""
    state_a = h.root / "a"
    state_a.mkdir(mode=0o700)
    (state_a / "tokens.json").write_text(json.dumps({"tokens": {h.token: {"project_id": "admin", "role": "admin"}}}))
    h.start(h.server_ns, ["up", "--tls", "--tls-san", SERVER_IP, "--dataplane", "ovn", "--state-dir", str(state_a),
                          "--agent-host", h.server_host, "--host", "0.0.0.0", "--port", str(API_PORT),
                          "--metadata-listen", f"0.0.0.0:{METADATA_PORT}", "--ovn-listen", SERVER_IP,
                          "--encap-iface", UNDERLAY_PORT, "--encap-ip", f"{SERVER_IP}/{UNDERLAY.prefixlen}"],
            "up.log")  # fmt: skip
    h.api_base = f"https://127.0.0.1:{API_PORT}"
    h.until("host A serves its API over TLS", lambda: _serving(h, state_a / "pki" / "ca.crt"))
    h.until("host A's agent registered", lambda: _alive(h, h.server_host))
    return state_a


def join_token(h: Hosts, state_a: Path, host: str) -> str:
    """`cloudnet host join-token HOST` on host A, as its admin runs it."""
    got = subprocess.run(["ip", "netns", "exec", h.server_ns, CLOUDNET, "--url", h.api_base, "--cacert",
                          str(state_a / "pki" / "ca.crt"), "--token", h.token, "host", "join-token", host],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert got.returncode == 0, got.stderr
    return got.stdout.strip()


def agent_b(h: Hosts, state_b: Path, *extra: str) -> subprocess.Popen[bytes]:
    """Host B's agent: only what is B's own (its state dir, its underlay), no token in its environment."""
    return h.start(h.agent_ns, ["agent", "--state-dir", str(state_b), "--encap-iface", UNDERLAY_PORT,
                                "--encap-ip", f"{AGENT_IP}/{UNDERLAY.prefixlen}", *extra], "agent.log",
                   token=False)  # fmt: skip


def foreign_ssl(root: Path, host: str) -> list[str]:
    """OVS's SSL options with a certificate of another CA (trusting the cloud's CA would not help it)."""
    cert, key = foreign_cert(root, host)
    return [f"--private-key={key}", f"--certificate={cert}", f"--ca-cert={cert}"]


def _instance_on_b(h: Hosts, net_id: str, index: int) -> dict[str, object]:
    ns = f"cn-join-{h.suffix}-i{index}"
    netns.create(ns)
    inst = h.create("instances", "instance", {"name": f"i{index}", "host": h.agent_host, "netns": ns,
                                              "nets": [{"network": net_id}]})  # fmt: skip
    h.until(f"instance {index} on B ACTIVE", lambda: _active(h, inst["id"]), timeout=60)
    return _active(h, inst["id"]) or {}


def test_a_host_joins_with_a_token_and_needs_nothing_else(hosts: Hosts) -> None:  # noqa: F811
    h = hosts
    state_a, state_b = up_tls(h), h.root / "b"
    token = join_token(h, state_a, h.agent_host)
    # B's underlay address, as a host has it before it joins anything (its chassis moves it onto its tunnel bridge).
    # Checksums complete on the wire: A's end is the userspace datapath, which completes no partial ones.
    subprocess.run(["ip", "-n", h.agent_ns, "addr", "add", f"{AGENT_IP}/{UNDERLAY.prefixlen}", "dev", UNDERLAY_PORT],
                   check=True)  # fmt: skip
    subprocess.run(["ip", "-n", h.agent_ns, "link", "set", UNDERLAY_PORT, "up"], check=True)
    veth.tx_checksum_off(h.agent_ns, UNDERLAY_PORT)
    agent = agent_b(h, state_b, "--join", f"https://{SERVER_IP}:{API_PORT}", token, "--host", h.agent_host)
    h.until("host B joined and its agent registered", lambda: _alive(h, h.agent_host), timeout=60)
    saved = join.load(state_b)
    assert saved is not None and saved.ovn_sb == f"ssl:{SERVER_IP}:6642", saved
    assert saved.metadata_url == f"https://{SERVER_IP}:{METADATA_PORT}", saved
    # OVN's databases: SSL on the given address only; a plain TCP client, or one without a certificate of the
    # cloud's CA, gets nothing from them.
    assert _listening(h.server_ns, 6641) == [f"{SERVER_IP}:6641"]
    assert _listening(h.server_ns, 6642) == [f"{SERVER_IP}:6642"]
    for client in (["ovsdb-client", "--timeout=5", "list-dbs", f"tcp:{SERVER_IP}:6642"],
                   ["ovsdb-client", "--timeout=5", *foreign_ssl(h.root, h.agent_host), "list-dbs",
                    f"ssl:{SERVER_IP}:6642"]):  # fmt: skip
        got = subprocess.run(["ip", "netns", "exec", h.agent_ns, *client], capture_output=True, text=True, timeout=30)
        assert got.returncode != 0 and "OVN_Southbound" not in got.stdout, (client, got.stdout, got.stderr)
    h.until("A's TLS front logged the refusals", lambda: (h.root / "up.log").read_text().count(
        f"front refused SB client {AGENT_IP}:") >= 2)  # fmt: skip

    net = h.create("networks", "network", {"name": "joined"})
    h.create("subnets", "subnet", {"network_id": net["id"], "cidr": "10.78.0.0/24"})
    b = _instance_on_b(h, net["id"], 1)
    # Metadata through B's localport and B's proxy, signed with the secret the join handed over.
    got = ns_run(str(b["netns"]), "curl", "-sS", "-m", "5", METADATA_URL)
    assert json.loads(got.stdout or "{}").get("uuid") == b["id"], got.stderr

    # B's agent restarts from what the join wrote: no token, no --join; it registers again with its certificate.
    # (Its instances are not checked again: each `ip netns exec` process has a mount namespace of its own, so the
    # namespaces the first agent made are not there for the second one to enter.)
    before = h.api("GET", f"/hosts/{h.agent_host}").json()["host"]["heartbeat_at"]
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(timeout=60) == 0, h.logs()  # (it stops once its long poll of the API answers: <= 30 s)
    h.procs.remove(agent)
    agent_b(h, state_b)
    h.until("B's restarted agent registered again",
            lambda: h.api("GET", f"/hosts/{h.agent_host}").json()["host"]["heartbeat_at"] > before)  # fmt: skip
    assert _alive(h, h.agent_host)

    # The token is spent: a second join with it is refused, and said so in A's log.
    again = subprocess.run(["ip", "netns", "exec", h.agent_ns, CLOUDNET, "agent", "--state-dir", str(h.root / "b2"),
                            "--join", f"https://{SERVER_IP}:{API_PORT}", token, "--host", h.agent_host],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert again.returncode == 1 and "the token was used already" in again.stderr, again.stderr
    h.until("the refusal logged on A", lambda: "join refused" in (h.root / "up.log").read_text())
    front_refuses_a_removed_host(h, state_a, state_b)


def front_refuses_a_removed_host(h: Hosts, state_a: Path, state_b: Path) -> None:
    """`cloudnet host remove B` on A: the TLS front of A's databases closes B's open SB connections (its
    ovn-controller's, its agent's) and refuses new ones, a real `ovsdb-client` with B's certificate included; each
    refusal logged with B's address, its certificate's subject and serial."""
    _ca, cert, key, _secret = join.Joined.files(state_b)
    serial = format(x509.load_cert(cert).serial_number, "x")
    ssl_b = ["--timeout=5", f"--private-key={key}", f"--certificate={cert}", f"--ca-cert={_ca}"]
    sb = f"ssl:{SERVER_IP}:6642"
    before = subprocess.run(["ip", "netns", "exec", h.agent_ns, "ovsdb-client", *ssl_b, "list-dbs", sb],
                            capture_output=True, text=True, timeout=30)  # fmt: skip
    assert "OVN_Southbound" in before.stdout.split(), before.stderr
    removed = subprocess.run(["ip", "netns", "exec", h.server_ns, CLOUDNET, "--url", h.api_base, "--cacert",
                              str(state_a / "pki" / "ca.crt"), "--token", h.token, "host", "remove", h.agent_host],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert removed.returncode == 0, removed.stderr
    log = h.root / "up.log"
    closed = f"refused SB client {AGENT_IP}:"
    h.until("B's open SB connection closed by A's front", lambda: any(
        closed in line and f"CN={h.agent_host}, serial {serial}" in line and "closed its open connection" in line
        for line in log.read_text().splitlines()), timeout=10)  # fmt: skip
    after = subprocess.run(["ip", "netns", "exec", h.agent_ns, "ovsdb-client", *ssl_b, "list-dbs", sb],
                           capture_output=True, text=True, timeout=30)  # fmt: skip
    assert after.returncode != 0 and "OVN_Southbound" not in after.stdout, after.stdout
    assert any(closed in line and "revoked" in line and "connection closed" in line
               for line in log.read_text().splitlines()), log.read_text()[-3000:]  # fmt: skip
