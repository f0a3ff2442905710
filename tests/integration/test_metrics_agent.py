"""/metrics after real work on a real host: an agent's passes over real namespaces, an instance whose namespace
cannot be used (a failed object), guests reading 169.254.169.254 from their namespace until the rate limit answers
429. What the agent counted reaches the scrape through its heartbeat, with its host's name; and a guest gets no
metrics from where it stands."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from cloudnet import metrics
from tests.integration.test_dhcp import _pid
from tests.integration.test_hostile_namespaces import post_instance, wait_error
from tests.integration.test_metadata_proxy import guest_request
from tests.support.cloud import Cloud
from tests.support.forward_site import Site
from tests.support.guest_metadata import agent_with_proxy
from tests.support.scrape import Scrape, scrape
from tests.support.server import RunningServer


def local(name: str, **labels: str) -> float:
    """This process's agent sample now (the agents of earlier tests in this process counted into it too)."""
    return metrics.AGENT.get_sample_value(name, labels) or 0.0


def until(cloud: Cloud, server: RunningServer, check: Callable[[Scrape], bool], what: str) -> Scrape:
    """Scrape until `check` holds: the agent's samples arrive with its next heartbeat (every 0.5 s here)."""
    deadline = time.monotonic() + 15
    while True:
        seen = scrape(server.url)
        if check(seen):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.root
def test_an_agents_work_shows_in_the_servers_scrape(cloud: Cloud, server: RunningServer) -> None:
    host = cloud.host
    applied = local("cloudnet_agent_objects_applied_total", kind="instance")
    ok_200 = local("cloudnet_metadata_requests_total", tree="openstack", status="200")
    ec2_200 = local("cloudnet_metadata_requests_total", tree="ec2", status="200")
    throttled = sum(local("cloudnet_metadata_requests_total", tree=t, status="429") for t in ("openstack", "ec2"))
    programmed = scrape(server.url).value("cloudnet_network_programming_duration_seconds_count")
    started = time.time()
    with agent_with_proxy(cloud, server):
        net, _sub = cloud.network("metrics", "10.96.0.0/24")
        inst = cloud.instance("mguest", [{"network": net["id"]}])
        ns = inst["netns"]
        assert guest_request(ns, "/openstack/latest/meta_data.json").status == 200
        assert guest_request(ns, "/latest/meta-data/instance-id").status == 200
        # A guest has no metrics at the metadata address (the API itself listens on the host's loopback only).
        assert guest_request(ns, "/metrics").status == 404
        statuses = [guest_request(ns, "/openstack/latest/meta_data.json").status for _ in range(400)]
        assert 429 in statuses  # (the proxy's burst here is 200)
        # A failed object: an instance whose namespace is a file.
        bad = post_instance(cloud.api, cloud, "mbad", net["id"], "/etc/hostname")
        wait_error(cloud, bad, "is not a namespace")

        def arrived(seen: Scrape) -> bool:
            return (seen.value("cloudnet_agent_objects_failed", host=host, kind="instance") >= 1
                    and seen.value("cloudnet_metadata_requests_total", host=host, tree="openstack", status="429")
                    + seen.value("cloudnet_metadata_requests_total", host=host, tree="ec2", status="429")
                    > throttled)  # fmt: skip

        seen = until(cloud, server, arrived, "the agent's samples of the failed instance and the 429s")
    assert seen.value("cloudnet_agent_objects_applied_total", host=host, kind="instance") > applied
    assert seen.value("cloudnet_metadata_requests_total", host=host, tree="openstack", status="200") > ok_200
    assert seen.value("cloudnet_metadata_requests_total", host=host, tree="ec2", status="200") > ec2_200
    assert seen.value("cloudnet_metadata_request_duration_seconds_count", host=host, tree="openstack") > 0
    assert seen.total("cloudnet_agent_passes_total", host=host, result="ok") >= 1
    assert seen.total("cloudnet_agent_pass_duration_seconds_count", host=host) >= 1
    assert seen.value("cloudnet_agent_last_successful_pass_timestamp_seconds", host=host) >= started
    assert seen.value("cloudnet_hosts", state="alive") >= 1
    assert seen.value("cloudnet_firewall_elements", host=host) > 0  # (the instance's default security group)
    # The instance's port: committed by its create, realised by the agent's report of ACTIVE.
    assert seen.value("cloudnet_network_programming_duration_seconds_count") > programmed


@pytest.mark.root
def test_forward_and_firewall_elements_follow_the_kernel(site: Site, server: RunningServer) -> None:
    """The gauges are what the agent applied to nftables: a forward's ports add map elements, its delete takes
    them away again; the instances' security groups hold elements all along."""
    host = site.cloud.host

    def elements(seen: Scrape) -> float:
        return seen.value("cloudnet_forward_elements", host=host)

    before = until(site.cloud, server, lambda s: s.value("cloudnet_firewall_elements", host=host) > 0, "firewall")
    site.forward({"listen_address": "192.0.2.53", "ports": [
        {"protocol": "tcp", "listen_port": "8080,9000-9009", "target_address": site.ip(site.a)}]})  # fmt: skip
    grown = until(site.cloud, server, lambda s: elements(s) >= elements(before) + 11, "the forward's elements")
    assert site.cloud.api.delete(f"/networks/{site.net['id']}/forwards/192.0.2.53").status_code == 204
    until(site.cloud, server, lambda s: elements(s) <= elements(grown) - 11, "the forward's elements gone")


@pytest.mark.root
def test_a_dead_dnsmasq_restarted_is_counted(cloud: Cloud, server: RunningServer) -> None:
    before = local("cloudnet_dnsmasq_restarts_total")
    cloud.start_agent()
    net, _sub = cloud.network("mdhcp", "10.73.0.0/24")
    cloud.instance("mdvm", [{"network": net["id"]}])
    pid = _pid(cloud, net["id"])
    assert local("cloudnet_dnsmasq_restarts_total") == before  # (started, not restarted)
    os.kill(pid, signal.SIGKILL)
    cloud.wait_for(lambda: local("cloudnet_dnsmasq_restarts_total") == before + 1, what="the restart counted")
    until(cloud, server, lambda s: s.value("cloudnet_dnsmasq_restarts_total", host=cloud.host) >= before + 1,
          "the count in the scrape")  # fmt: skip
