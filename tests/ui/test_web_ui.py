"""The web UI in a real browser (Debian's chromium, headless) against a real `cloudnet up` this module starts:
log in, build a network, subnet, router and forward from the pages, watch an instance made by the CLI appear on
the map, and see a member kept to their project, with names that are markup shown as text.

One server and one browser for the module (the tests share them and make their own objects). Screenshots of every
page go to $CLOUDNET_ARTIFACTS/ui when set, else to this run's pytest temporary directory (`ui-screenshots*`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from cloudnet.dataplane.linux.dhcp import DhcpServers
from tests.support.browser import UiPage, chromium, wait_for
from tests.support.png import drawn_share
from tests.support.process import CLOUDNET, PRIVATE_NETNS, free_port, serve

PASSWORDS = {"ada": "ada-secret-pw-1", "mo": "mo-secret-pw-2"}  # ada: admin of ops; mo: member of alice
HOSTILE = '<img src=x onerror="document.body.dataset.pwned=1">'
# what an agent reports of an object it cannot converge (agent/agent.py), markup in its reason included
REPORT = {"failure_count": 1, "failures": [{"object": "port 1234", "reason": "tap <b>gone</b>",
                                            "since": "2026-01-01T00:00:00Z", "attempts": 3}]}  # fmt: skip
PAGES = ("map", "networks", "ports", "routers", "instances", "security-groups", "forwards", "floatingips",
         "port-pools", "hosts", "quotas")  # fmt: skip


class Cloud(NamedTuple):
    url: str
    admin: httpx.Client  # of /v2.0, as ada (admin of ops)
    host: str  # the agent's


def _token(url: str, user: str) -> str:
    body = {"auth": {"identity": {"methods": ["password"], "password": {
        "user": {"name": user, "domain": {"id": "default"}, "password": PASSWORDS[user]}}}}}  # fmt: skip
    answer = httpx.post(url + "/v3/auth/tokens", json=body, timeout=30)
    assert answer.status_code == 201, answer.text
    return answer.headers["X-Subject-Token"]


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    """A `cloudnet up` (server and this host's agent, a host name of this run) with two users; and a second host
    that has only reported a failure (registered as an agent does)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (cloudnet up plugs instances into network namespaces)")
    host = f"ui-{uuid.uuid4().hex[:8]}"
    # a short state dir: the SmartOS sockets under it must fit sun_path (108 bytes), which pytest's tmp may not
    state = Path(tempfile.mkdtemp(prefix="cnui", dir="/tmp"))
    log = tmp_path_factory.mktemp("ui-up") / "up.log"
    try:
        for user, project, role in (("ada", "ops", "admin"), ("mo", "alice", "member")):
            subprocess.run([CLOUDNET, "user", "set", user, "--project", project, "--role", role, "--password-stdin",
                            "--state-dir", str(state)], input=PASSWORDS[user] + "\n", text=True, check=True,
                           capture_output=True)  # fmt: skip
        up = serve(state, "--agent-host", host, "--metadata-listen", f"127.0.0.1:{free_port()}", command="up",
                   wrapper=PRIVATE_NETNS, log=log)  # fmt: skip
        with up as (_proc, url), httpx.Client(base_url=url + "/v2.0", timeout=30) as admin:
            admin.headers["X-Auth-Token"] = _token(url, "ada")
            wait_for(lambda: any(h["name"] == host for h in _ok(admin.get("/hosts"))["hosts"]), timeout=60,
                     why=f"the agent of {host} registered")  # fmt: skip
            _ok(admin.put(f"/hosts/{host}-reported", json={"host": {"agent_version": "test", "report": REPORT}}))
            yield Cloud(url, admin, host)
    finally:
        DhcpServers(host).teardown()  # dnsmasq outlives its agent (a restarted one adopts it)
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = os.environ.get("CLOUDNET_ARTIFACTS")
    if root:
        path = Path(root) / "ui"
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("ui-screenshots")


@pytest.fixture(scope="module")
def ui(cloud: Cloud, screenshots: Path) -> Iterator[UiPage]:
    driver = chromium()
    try:
        yield UiPage(driver, cloud.url, screenshots)
    finally:
        driver.quit()


def _ok(answer: httpx.Response) -> Any:
    assert answer.status_code < 300, answer.text
    return answer.json() if answer.content else None


def _one(admin: httpx.Client, collection: str, name: str) -> dict[str, Any]:
    found = _ok(admin.get(f"/{collection}", params={"name": name}))[collection.replace("-", "_")]
    assert len(found) == 1, found
    return found[0]  # type: ignore[no-any-return]


def test_admin_builds_a_network_router_and_forward(ui: UiPage, cloud: Cloud) -> None:
    admin = cloud.admin
    ui.login("ada", PASSWORDS["ada"])
    ui.go("networks")
    ui.fill("New network", name="public", external=True)
    wait_for(lambda: "public" in ui.table_text(), why="network public listed")
    ui.fill("New subnet", network_id="public", cidr="192.0.2.0/24")
    wait_for(lambda: "192.0.2.0/24" in ui.table_text(), why="its subnet listed")
    ui.fill("New network", name="web")
    wait_for(lambda: "web" in ui.table_text())
    ui.fill("New subnet", network_id="web", name="web-v4", cidr="10.20.0.0/24")
    wait_for(lambda: "10.20.0.0/24" in ui.table_text())
    web = _one(admin, "networks", "web")
    assert _one(admin, "subnets", "web-v4")["network_id"] == web["id"]

    ui.go("routers")
    ui.fill("New router", name="edge", external="public")
    wait_for(lambda: "edge" in ui.table_text() and "192.0.2." in ui.table_text(), why="router with its gateway")
    ui.fill("Attach subnet", router="edge", subnet="10.20.0.0/24")
    wait_for(lambda: "10.20.0.1" in ui.table_text(), why="the router's interface on web")
    edge = _one(admin, "routers", "edge")
    links = _ok(admin.get("/ports", params={"device_id": edge["id"], "network_id": web["id"]}))["ports"]
    assert [p["fixed_ips"][0]["ip_address"] for p in links] == ["10.20.0.1"]

    ui.go("forwards")
    ui.fill("New forward", network="web", listen_address="192.0.2.10", ports="tcp 80 10.20.0.5 8080")
    wait_for(lambda: "192.0.2.10" in ui.table_text(), why="forward listed")
    assert ui.error() == ""
    forwards = f"/networks/{web['id']}/forwards"
    assert _ok(admin.get(forwards))["forwards"][0]["ports"][0]["target_port"] == "8080"
    # its ports edited in place
    ui.focus('textarea[aria-label="Ports of 192.0.2.10"]')  # (a live redraw then waits for the focus to leave)
    ui.driver.switch_to.active_element.send_keys(Keys.END, "\ntcp 443 10.20.0.5 8443")
    ui.css('button[aria-label="Save ports of 192.0.2.10"]').click()
    wait_for(lambda: len(_ok(admin.get(forwards))["forwards"][0]["ports"]) == 2, why="the second port saved")
    # a refusal is shown as the API says it: a target outside the network
    ui.fill("New forward", network="web", listen_address="192.0.2.11", ports="tcp 22 10.99.0.5")
    wait_for(ui.error, why="the API's refusal shown")
    refusal = _ok_error(admin.post(forwards, json={"listen_address": "192.0.2.11", "ports": [
        {"protocol": "tcp", "listen_port": "22", "target_address": "10.99.0.5"}]}))  # fmt: skip
    assert refusal in ui.error()
    # a floating IP on the external network, from its page (the forward is one too: Neutron's face shows both)
    before = {f["floating_ip_address"] for f in _ok(admin.get("/floatingips"))["floatingips"]}
    ui.go("floatingips")
    ui.fill("New floating IP", network="public")
    new = wait_for(lambda: {f["floating_ip_address"] for f in _ok(admin.get("/floatingips"))["floatingips"]} - before,
                   why="a floating IP allocated")  # fmt: skip
    address = next(iter(new))
    wait_for(lambda: address in ui.table_text(), why="the floating IP listed")
    ui.driver.execute_script("console.error('cloudnet console probe')")  # the console is read (loggingPrefs)
    assert any("cloudnet console probe" in e["message"] for e in ui.driver.get_log("browser"))
    for page in PAGES:
        ui.go(page)
        ui.shoot(f"admin-{page}")
        # nothing wider than the 1280-pixel window: no sideways scrolling
        width = ui.driver.execute_script("return [document.documentElement.scrollWidth, innerWidth]")
        assert width[0] <= width[1], f"page {page} is {width[0]} px wide in a {width[1]} px window"
        # no script refused by the policy, no uncaught error while it loaded and drew
        assert ui.console_faults() == [], f"page {page}"
    ui.go("hosts")
    assert "port 1234: tap <b>gone</b> (since 2026-01-01T00:00:00Z, 3 attempts)" in ui.table_text()
    ui.go("forwards")
    ui.css('button[aria-label="Delete forward 192.0.2.10"]').click()
    ui.driver.switch_to.alert.accept()
    wait_for(lambda: "192.0.2.10" not in ui.table_text(), why="forward gone from the page")
    assert _ok(admin.get(forwards))["forwards"] == []


def _ok_error(answer: httpx.Response) -> str:
    assert answer.status_code >= 400, answer.text
    return str(answer.json()["NeutronError"]["message"])


def _unless_redrawn(read: Any) -> bool:
    """`read()`, or False when the element it read was replaced meanwhile (the next look finds the new one)."""
    try:
        return bool(read())
    except StaleElementReferenceException:
        return False


def test_an_instance_made_by_the_cli_appears_on_the_map(ui: UiPage, cloud: Cloud) -> None:
    url, admin = cloud.url, cloud.admin
    net = _ok(admin.post("/networks", json={"network": {"name": "live-net"}}))["network"]
    _ok(admin.post("/subnets", json={"subnet": {"network_id": net["id"], "cidr": "10.30.0.0/24", "ip_version": 4}}))
    ui.login("ada", PASSWORDS["ada"])
    wait_for(lambda: ui.all(f'svg.map [data-id="{net["id"]}"]'), why="the network on the map")
    ui.driver.execute_script("window.notReloaded = true")
    made = subprocess.run([CLOUDNET, "--url", url, "--token", _token(url, "ada"), "instance", "create", "live-vm",
                           "--nets", f"network={net['id']}", "--host", cloud.host, "-f", "json"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    instance = _one(admin, "instances", "live-vm")
    drawn = f'svg.map g[data-id="{instance["id"]}"]'
    wait_for(lambda: ui.all(drawn), why="the instance drawn, live")
    address = instance["nets"][0]["fixed_ips"][0]["ip_address"]
    # (read afresh each time: a live update may redraw the node between finding it and reading it)
    wait_for(lambda: _unless_redrawn(lambda: "live-vm" in ui.css(drawn).text and address in ui.css(drawn).text),
             why="the instance's name and address on the map")  # fmt: skip
    # and turns ACTIVE once this host's agent has plugged it: its status redrawn live too
    wait_for(lambda: _unless_redrawn(lambda: "active" in (ui.css(drawn).get_attribute("class") or "")),
             timeout=60, why="the instance ACTIVE on the map")  # fmt: skip
    assert ui.driver.execute_script("return window.notReloaded") is True  # drawn by the live update, no reload
    ui.shoot("map-live")
    # the map is drawn: a good share of its pixels are not its background
    share = drawn_share(ui.css("svg.map").screenshot_as_png)
    assert share > 0.02, f"the map is nearly empty ({share:.1%} drawn)"
    # keyboard: the map takes focus, + zooms in (its viewBox narrows), 0 fits again
    view = ui.css("svg.map").get_dom_attribute("viewBox")
    assert view
    ui.driver.execute_script("document.querySelector('svg.map').focus()")  # (where Tab brings a keyboard user)
    ActionChains(ui.driver).send_keys("+").perform()
    wait_for(lambda: ui.css("svg.map").get_dom_attribute("viewBox") != view, why="zoomed by the keyboard")
    ActionChains(ui.driver).send_keys("0").perform()
    # searchable: what does not match is dimmed
    ui.css('input[aria-label="Search the map"]').send_keys("live-vm")
    wait_for(lambda: "match" in (ui.css(f'svg.map g[data-id="{instance["id"]}"]').get_attribute("class") or ""))
    assert "dim" in (ui.css(f'svg.map g[data-id="{net["id"]}"]').get_attribute("class") or "")


def test_a_member_sees_only_their_project_and_markup_as_text(ui: UiPage, cloud: Cloud) -> None:
    url, admin = cloud.url, cloud.admin
    _ok(admin.post("/networks", json={"network": {"name": "bob-secret", "project_id": "bob"}}))
    _ok(admin.post("/networks", json={"network": {"name": HOSTILE, "project_id": "alice"}}))
    ui.login("mo", PASSWORDS["mo"])
    assert "(admin)" not in ui.css("#who").text and not ui.all('#nav a[data-page="hosts"]')
    ui.go("networks")
    wait_for(lambda: HOSTILE in ui.table_text(), why="the hostile name shown as text")
    text = ui.table_text()
    assert "bob-secret" not in text and "live-net" not in text  # (public: external, everyone sees it)
    assert not ui.all("#page .data img") and ui.driver.execute_script("return document.body.dataset.pwned") is None
    ui.shoot("member-networks")
    ui.go("map")
    svg = ui.css("svg.map").get_attribute("textContent") or ""
    assert "bob-secret" not in svg and "live-vm" not in svg
    assert HOSTILE[:20] in svg and not ui.all("svg.map image, svg.map foreignObject")  # the map's labels: text too
    assert ui.driver.execute_script("return document.body.dataset.pwned") is None
    # logged out: the live updates end (their mode leaves the header); in again without a reload, the map is the
    # new session's (nothing of the last one's search)
    wait_for(lambda: ui.css("#live").text, why="the live updates' mode shown")
    ui.css('input[aria-label="Search the map"]').send_keys("alice")
    ui.logout()
    assert ui.css("#live").text == ""
    ui.login("mo", PASSWORDS["mo"], fresh=False)
    assert ui.css('input[aria-label="Search the map"]').get_attribute("value") == ""
    wait_for(lambda: ui.css("#live").text, why="the live updates' mode shown again")
    # a token pasted instead of a password: the same view
    ui.login(token=_token(url, "mo"))
    ui.go("networks")
    assert "bob-secret" not in ui.table_text() and HOSTILE in ui.table_text()
    # an admin switches project: bob's network only
    ui.login("ada", PASSWORDS["ada"])
    ui.css("#project").find_element(By.CSS_SELECTOR, 'option[value="bob"]').click()
    ui.go("networks")
    wait_for(lambda: "bob-secret" in ui.table_text() and HOSTILE not in ui.table_text(), why="bob's project only")
    ui.shoot("admin-project-bob")
