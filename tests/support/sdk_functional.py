"""openstacksdk's own functional network tests (openstack/tests/functional/network/v2/ of its sdist), run as a
subprocess against a cloudnet: which test classes apply, and what each of the others waits for.

A class applies when every Neutron extension alias it needs is in the server's /v2.0/extensions and it needs
nothing outside the network API; then every one of its tests must pass (or skip itself for an optional
sub-feature, as the sdk's tests do, e.g. `l3-ha`). The aliases are Neutron's: the extension that provides the
resource or behaviour the class drives (floating IPs are part of `router`, as in Neutron).
"""

from __future__ import annotations

import ast
import collections
import importlib.metadata
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / ".venv" / "sdk-tests" / f"openstacksdk-{importlib.metadata.version('openstacksdk')}"
TESTS = SDK / "openstack" / "tests" / "functional" / "network" / "v2"
# What a class needs besides extensions: Keystone's admin API (projects, domains, role assignments).
KEYSTONE_ADMIN = "keystone-v3-admin"
TAGS = "standard-attr-tag"

# Every test class of network/v2 in openstacksdk 4.22.0, with what it needs (a new class fails the check).
NEEDS: dict[str, tuple[str, ...]] = {
    "TestAddressGroup": ("address-group",),
    "TestAddressScope": ("address-scope",),
    "TestAgent": ("agent",),
    "TestAgentNetworks": ("agent", "dhcp_agent_scheduler"),
    "TestAgentRouters": ("agent", "l3_agent_scheduler"),
    "TestAutoAllocatedTopology": ("auto-allocated-topology",),
    "TestAvailabilityZone": ("availability_zone",),
    "TestBGPSpeaker": ("bgp",),
    "TestBGPVPN": ("bgpvpn",),
    "TestDefaultSecurityGroupRule": ("security-groups-default-rules",),
    "TestDVRRouter": ("dvr",),
    "TestExtension": ("external-net",),
    "TestFirewallGroup": ("fwaas_v2",),
    "TestFirewallPolicy": ("fwaas_v2",),
    "TestFirewallPolicyRuleAssociations": ("fwaas_v2",),
    "TestFirewallRule": ("fwaas_v2",),
    "TestFlavor": ("flavors",),
    "TestFloatingIP": ("router", "external-net", TAGS),
    "TestL3ConntrackHelper": ("l3-conntrack-helper",),
    "TestLocalIP": ("local_ip",),
    "TestLocalIPAssociation": ("local_ip",),
    "TestNDPProxy": ("l3-ndp-proxy",),
    "TestNetwork": (TAGS,),
    "TestNetworkIPAvailability": ("network-ip-availability",),
    "TestNetworkSegmentRange": ("network-segment-range",),
    "TestPort": (TAGS,),
    "TestPortForwarding": ("router", "external-net", "floating-ip-port-forwarding"),
    "TestQoSBandwidthLimitRule": ("qos", "qos-bw-limit-direction"),
    "TestQoSDSCPMarkingRule": ("qos",),
    "TestQoSMinimumBandwidthRule": ("qos", "qos-bw-limit-direction"),
    "TestQoSMinimumPacketRateRule": ("qos", "qos-pps-minimum"),
    "TestQoSPacketRateLimitRule": ("qos", "qos-pps"),
    "TestQoSPolicy": ("qos",),
    "TestQoSRuleType": ("qos", "qos-rule-type-details"),
    "TestQuota": ("quotas", KEYSTONE_ADMIN),  # makes a temporary project through Keystone's admin API
    "TestRBACPolicy": ("rbac-policies",),
    "TestRouter": ("router", TAGS),
    "TestRouterInterface": ("router",),
    "TestSFCFlowClassifier": ("sfc",),
    "TestSecurityGroup": ("security-group", TAGS),
    "TestSecurityGroupRule": ("security-group",),
    "TestSegment": ("segment",),
    "TestServiceProfile": ("flavors",),
    "TestServiceProvider": ("service-type",),
    "TestSubnet": (TAGS,),
    "TestSubnetFromSubnetPool": ("subnet_allocation",),
    "TestSubnetPool": ("subnet_allocation", TAGS),
    "TestTapMirror": ("tap-mirror",),
    "TestTapService": ("taas",),
    "TestTrunk": ("trunk",),
    "TestVpnIkePolicy": ("vpnaas",),
}


def sdk_classes() -> dict[str, Path]:
    """Every test class the sdist's network/v2 functional tests define, and its file."""
    found: dict[str, Path] = {}
    for path in sorted(TESTS.glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                found[node.name] = path
    return found


def missing(name: str, aliases: set[str]) -> list[str]:
    """What class `name` needs that the server does not offer (none: it applies)."""
    return [need for need in NEEDS[name] if need not in aliases]


@dataclass
class Outcome:
    counts: dict[str, collections.Counter[str]] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)  # test id -> message

    def total(self) -> collections.Counter[str]:
        out: collections.Counter[str] = collections.Counter()
        for c in self.counts.values():
            out.update(c)
        return out


def run(targets: list[str], clouds_yaml: Path, junit: Path, timeout: float) -> Outcome:
    """Run the sdk's tests `targets` (file::Class) with pytest in a subprocess; their outcome per class."""
    env = {**os.environ, "PYTHONPATH": str(SDK), "OS_CLIENT_CONFIG_FILE": str(clouds_yaml)}
    for name in ("OS_CLOUD", "OS_AUTH_URL", "OS_AUTH_TYPE", "OS_ENDPOINT", "OS_TOKEN"):
        env.pop(name, None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:logging", "-W", "ignore",
           "-o", "addopts=", "--rootdir", str(SDK), f"--junitxml={junit}", *targets]  # fmt: skip
    subprocess.run(cmd, cwd=SDK, env=env, timeout=timeout, capture_output=True, check=False)
    outcome = Outcome()
    for case in ET.parse(junit).iter("testcase"):
        cls = str(case.get("classname")).rsplit(".", 1)[-1]
        state = "passed"
        for child in case:
            if child.tag == "skipped":
                state = "skipped"
            elif child.tag in ("failure", "error"):
                state = "failed"
                outcome.failures[f"{cls}.{case.get('name')}"] = (child.text or child.get("message") or "")[-600:]
        outcome.counts.setdefault(cls, collections.Counter())[state] += 1
    return outcome
