"""`cloudnet network forward ...` (LXD's syntax) and `cloudnet network set|unset` end to end against the
live server, on both database backends.

Commands run in-process as in test_cli.py. Where a test needs to see or race the CLI's requests it gives
the CLI a real `httpx.Client` whose request hook observes each request (and may change the forward
through the API just before the CLI's write lands); one test runs the installed `cloudnet` in a
pseudo-terminal so that `edit` takes its $EDITOR path.
"""

from __future__ import annotations

import csv
import io
import os
import pty
import select
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.api.test_forwards import Site, build_site, error, port, post, show, url
from tests.support.cli import Cli, show_table, table_dicts
from tests.support.server import RunningServer

Json = dict[str, Any]


@pytest.fixture
def cli(server: RunningServer) -> Cli:
    return Cli(server.url)


@pytest.fixture
def site(api: httpx.Client) -> Site:
    return build_site(api)


class Watch:
    """A real client for the CLI whose hook records each request; `before_put` runs just before a PUT goes out."""

    def __init__(self, before_put: Callable[[], None] | None = None) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.before_put = before_put
        self.client = httpx.Client(event_hooks={"request": [self._hook]})

    def _hook(self, request: httpx.Request) -> None:
        self.requests.append((request.method, request.url.path, dict(request.headers)))
        if request.method == "PUT" and self.before_put is not None:
            before, self.before_put = self.before_put, None
            before()

    def puts(self) -> list[dict[str, str]]:
        return [headers for method, _path, headers in self.requests if method == "PUT"]

    def close(self) -> None:
        self.client.close()


def stored(api: httpx.Client, address: str, network: str = "private") -> Json:
    return show(api, network, address)[0]


# -- create, list, show, delete -------------------------------------------------------------------------------


def test_create_list_show_delete_in_every_format(cli: Cli, api: httpx.Client, site: Site) -> None:
    out = cli.out("network", "forward", "create", "private", "192.0.2.10", "target_address=10.0.0.5", "user.a=x=y",
                 "--description", "web")  # fmt: skip
    assert out == "Network forward 192.0.2.10 created\n"
    fwd = stored(api, "192.0.2.10")
    assert (fwd["description"], fwd["config"], fwd["ports"]) == (
        "web",
        {"target_address": "10.0.0.5", "user.a": "x=y"},
        [],
    )
    # The canonical address is what is reported.
    assert (
        cli.out("network", "forward", "create", "private", "2001:DB8:0::10") == "Network forward 2001:db8::10 created\n"
    )
    ports = [port(target_address="fd00::6"), port(protocol="udp", target_address="fd00::6")]
    assert api.patch(url("private", "2001:db8::10"), json={"ports": ports}).status_code == 200
    v6 = stored(api, "2001:db8::10")

    listed = api.get(url("private")).json()["forwards"]
    assert cli.json("network", "forward", "list", "private") == listed
    assert cli.json("network", "forward", "list", site.networks["private"]["id"]) == listed
    assert yaml.safe_load(cli.out("network", "forward", "list", "private", "-f", "yaml")) == listed
    expected_rows = [
        {"Listen Address": "192.0.2.10", "Description": "web", "Default Target Address": "10.0.0.5", "Ports": "0"},
        {"Listen Address": "2001:db8::10", "Description": "", "Default Target Address": "", "Ports": "2"},
    ]
    assert table_dicts(cli.out("network", "forward", "list", "private")) == expected_rows
    assert list(csv.DictReader(io.StringIO(cli.out("network", "forward", "list", "private", "-f", "csv")))) == (
        expected_rows
    )

    assert cli.json("network", "forward", "show", "private", "192.0.2.10") == fwd
    assert cli.json("network", "forward", "show", "private", "2001:DB8::10") == v6
    assert yaml.safe_load(cli.out("network", "forward", "show", "private", "2001:db8::10", "-f", "yaml")) == v6
    table = show_table(cli.out("network", "forward", "show", "private", "192.0.2.10"))
    assert list(table) == sorted(fwd)
    assert (table["listen_address"], table["description"]) == ("192.0.2.10", "web")
    assert table["config"] == "target_address=10.0.0.5, user.a=x=y"
    rows = dict(list(csv.reader(io.StringIO(cli.out("network", "forward", "show", "private", "2001:db8::10",
                                                   "-f", "csv"))))[1:])  # fmt: skip
    assert rows["ports"].splitlines() == [
        "description=, protocol=tcp, listen_port=80, target_port=, target_address=fd00::6",
        "description=, protocol=udp, listen_port=80, target_port=, target_address=fd00::6",
    ]

    assert cli.out("network", "forward", "delete", "private", "192.0.2.10") == "Network forward 192.0.2.10 deleted\n"
    error(api.get(url("private", "192.0.2.10")), 404)
    assert cli.fail("network", "forward", "show", "private", "192.0.2.10") == (
        "Error: Network forward not found (404 NetworkForwardNotFound)"
    )
    assert cli.fail("network", "forward", "delete", "private", "192.0.2.10") == (
        "Error: Network forward not found (404 NetworkForwardNotFound)"
    )
    assert [f["listen_address"] for f in api.get(url("private")).json()["forwards"]] == ["2001:db8::10"]


def test_create_errors(cli: Cli, api: httpx.Client, site: Site) -> None:
    site.network("isolated", "10.2.0.0/24", uplink=False)
    assert (
        cli.fail("network", "forward", "create", "private", "192.0.2.10", "oops") == "Error: Bad key/value pair: oops"
    )
    assert cli.fail("network", "forward", "create", "private", "192.0.2.10", "=x") == "Error: Bad key/value pair: =x"
    assert cli.fail("network", "forward", "create", "private", "192.0.2.10", "bogus=1") == (
        'Error: Invalid option "bogus" (400 HTTPBadRequest)'
    )
    assert cli.fail("network", "forward", "create", "private", "nope") == (
        'Error: Failed parsing address forward listen address "nope": invalid IP address (400 HTTPBadRequest)'
    )
    assert cli.fail("network", "forward", "create", "private", "0.0.0.0") == (
        'Error: Cannot use unspecified address: "0.0.0.0" (400 HTTPBadRequest)'
    )
    line = cli.fail("network", "forward", "create", "isolated", "192.0.2.10")
    assert "has no uplink" in line and line.endswith("(400 NetworkHasNoUplink)")
    assert cli.fail("network", "forward", "create", "nope", "192.0.2.10") == "Error: No network found for 'nope'"
    assert cli.fail("network", "forward", "list", "nope") == "Error: No network found for 'nope'"
    assert api.get(url("private")).json()["forwards"] == []
    cli.out("network", "forward", "create", "private", "192.0.2.10")
    assert cli.fail("network", "forward", "create", "private", "192.0.2.10") == (
        "Error: A forward for that listen address already exists (409 NetworkForwardExists)"
    )
    assert cli.fail("network", "forward", "show", "private", " ") == "Error: A listen address cannot be empty"
    # Usage errors are click's (exit status 2), before any request.
    assert cli.run("network", "forward", "create", "private").exit_code == 2


def test_create_from_stdin_yaml(cli: Cli, api: httpx.Client, site: Site) -> None:
    document = """
description: from yaml
config:
  target_address: 10.0.0.5
  user.n: 7
ports:
- protocol: tcp
  listen_port: 80
  target_address: 10.0.0.6
  target_port: 8080
- description: dns
  protocol: udp
  listen_port: 53, 54
  target_address: 10.0.0.7
"""
    assert cli.out("network", "forward", "create", "private", "192.0.2.10", input=document) == (
        "Network forward 192.0.2.10 created\n"
    )
    fwd = stored(api, "192.0.2.10")
    assert fwd["description"] == "from yaml"
    assert fwd["config"] == {"target_address": "10.0.0.5", "user.n": "7"}
    assert fwd["ports"] == [
        {"description": "", "protocol": "tcp", "listen_port": "80", "target_port": "8080",
         "target_address": "10.0.0.6"},
        {"description": "dns", "protocol": "udp", "listen_port": "53,54", "target_port": "",
         "target_address": "10.0.0.7"},
    ]  # fmt: skip
    # Arguments win over the document: config merged key by key, the description replaced.
    cli.out("network", "forward", "create", "private", "192.0.2.11", "user.n=8", "--description", "flag",
           input="description: doc\nconfig:\n  user.n: '1'\n  user.m: '2'\n")  # fmt: skip
    fwd = stored(api, "192.0.2.11")
    assert (fwd["description"], fwd["config"]) == ("flag", {"user.m": "2", "user.n": "8"})
    line = cli.fail("network", "forward", "create", "private", "192.0.2.12", input="porst: []\n")
    assert line == "Error: Invalid YAML: unknown key(s) porst (expected description, config, ports)"
    assert cli.fail("network", "forward", "create", "private", "192.0.2.12", input="ports: [oops\n").startswith(
        "Error: Invalid YAML: "
    )
    assert cli.fail("network", "forward", "create", "private", "192.0.2.12", input="- a\n") == (
        "Error: Invalid YAML: expected a mapping with description, config and ports"
    )
    assert cli.fail("network", "forward", "create", "private", "192.0.2.12",
                    input="ports:\n- {protocol: TCP, listen_port: 80, target_address: 10.0.0.6}\n") == (
        "Error: Invalid port protocol in port specification 0, protocol must be one of: tcp, udp (400 HTTPBadRequest)"
    )  # fmt: skip
    assert [f["listen_address"] for f in api.get(url("private")).json()["forwards"]] == ["192.0.2.10", "192.0.2.11"]


# -- get, set, unset ----------------------------------------------------------------------------------------------


def test_get_set_unset(cli: Cli, api: httpx.Client, site: Site) -> None:
    post(api, "private", {"listen_address": "192.0.2.10", "ports": [port()]})
    base = ("private", "192.0.2.10")
    assert cli.out("network", "forward", "set", *base, "target_address=10.0.0.5", "user.a=1") == ""
    fwd = stored(api, "192.0.2.10")
    assert fwd["config"] == {"target_address": "10.0.0.5", "user.a": "1"}
    assert len(fwd["ports"]) == 1  # set keeps the ports
    assert cli.out("network", "forward", "get", *base, "target_address") == "10.0.0.5\n"
    assert cli.out("network", "forward", "get", *base, "user.missing") == ""
    # LXD's `set NETWORK ADDRESS KEY VALUE` form.
    cli.out("network", "forward", "set", *base, "user.b", "two words")
    assert cli.out("network", "forward", "get", *base, "user.b") == "two words\n"

    # The description: a property, with or without -p.
    cli.out("network", "forward", "set", *base, "description=the web")
    assert stored(api, "192.0.2.10")["description"] == "the web"
    assert cli.out("network", "forward", "get", *base, "description") == "the web\n"
    cli.out("network", "forward", "set", *base, "-p", "description=via -p")
    assert cli.out("network", "forward", "get", *base, "-p", "description") == "via -p\n"
    assert cli.out("network", "forward", "get", "private", "192.0.2.10", "--property", "listen_address") == (
        "192.0.2.10\n"
    )
    cli.out("network", "forward", "unset", *base, "description")
    assert stored(api, "192.0.2.10")["description"] == ""

    cli.out("network", "forward", "unset", *base, "user.a")
    cli.out("network", "forward", "unset", *base, "target_address")
    fwd = stored(api, "192.0.2.10")
    assert fwd["config"] == {"user.b": "two words"}
    assert len(fwd["ports"]) == 1

    before = stored(api, "192.0.2.10")
    assert (
        cli.fail("network", "forward", "set", *base, "bogus=1") == 'Error: Invalid option "bogus" (400 HTTPBadRequest)'
    )
    assert cli.fail("network", "forward", "set", *base, "target_address=10.0.0.6") == (
        "Error: Target address is same as default target address in port specification 0 (400 HTTPBadRequest)"
    )
    assert cli.fail("network", "forward", "set", *base, "oops") == "Error: Bad key/value pair: oops"
    assert cli.fail("network", "forward", "set", *base, "-p", "listen_address=192.0.2.11") == (
        'Error: The property "listen_address" of the network forward "192.0.2.10" cannot be set'
    )
    assert cli.fail("network", "forward", "get", *base, "-p", "bogus") == (
        'Error: The property "bogus" does not exist on the network forward "192.0.2.10"'
    )
    assert cli.fail("network", "forward", "get", *base, "-p", "ports").startswith('Error: The property "ports"')
    assert cli.fail("network", "forward", "set", "private", "192.0.2.99", "user.a=1") == (
        "Error: Network forward not found (404 NetworkForwardNotFound)"
    )
    assert stored(api, "192.0.2.10") == before


def test_set_sends_the_etag_and_loses_no_concurrent_change(cli: Cli, api: httpx.Client, site: Site) -> None:
    post(api, "private", {"listen_address": "192.0.2.10", "config": {"user.a": "1"}})
    etag = show(api, "private", "192.0.2.10")[1]
    watch = Watch()
    try:
        cli.out("network", "forward", "set", "private", "192.0.2.10", "user.b=2", http=watch.client)
        [put_headers] = watch.puts()
        assert put_headers["if-match"] == etag
    finally:
        watch.close()

    # Someone else changes the forward between the CLI's read and its write: the write is refused.
    def meanwhile() -> None:
        r = api.patch(url("private", "192.0.2.10"), json={"config": {"user.other": "theirs"}})
        assert r.status_code == 200, r.text

    for command in (
        ("set", "private", "192.0.2.10", "user.c=3"),
        ("unset", "private", "192.0.2.10", "user.a"),
        ("port", "add", "private", "192.0.2.10", "tcp", "80", "10.0.0.6"),
    ):
        watch = Watch(before_put=meanwhile)
        try:
            line = cli.fail("network", "forward", *command, http=watch.client)
        finally:
            watch.close()
        assert line.startswith("Error: ETag does not match: "), line
        assert line.endswith("Please retrieve the updated configuration before proceeding. (412 PreconditionFailed)")
        fwd = stored(api, "192.0.2.10")
        assert fwd["config"] == {"user.a": "1", "user.b": "2", "user.other": "theirs"}, command
        assert fwd["ports"] == []
        api.patch(url("private", "192.0.2.10"), json={"config": {"user.other": ""}})


# -- edit ----------------------------------------------------------------------------------------------------------


def test_edit_from_stdin(cli: Cli, api: httpx.Client, site: Site) -> None:
    post(api, "private", {"listen_address": "192.0.2.10", "description": "old", "config": {"user.a": "1"},
                          "ports": [port()]})  # fmt: skip
    # What `show -f yaml` prints can be edited and fed back (read-only fields are ignored).
    document = yaml.safe_load(cli.out("network", "forward", "show", "private", "192.0.2.10", "-f", "yaml"))
    document["description"] = "new"
    document["config"] = {"target_address": "10.0.0.5"}
    document["ports"].append({"protocol": "udp", "listen_port": 53, "target_address": "10.0.0.7"})
    watch = Watch()
    try:
        assert cli.out("network", "forward", "edit", "private", "192.0.2.10", input=yaml.safe_dump(document),
                      http=watch.client) == ""  # fmt: skip
        [put_headers] = watch.puts()
        assert "if-match" not in put_headers  # stdin replaces whatever is there, as in LXD
    finally:
        watch.close()
    fwd = stored(api, "192.0.2.10")
    assert (fwd["description"], fwd["config"]) == ("new", {"target_address": "10.0.0.5"})
    assert [(p["protocol"], p["listen_port"]) for p in fwd["ports"]] == [("tcp", "80"), ("udp", "53")]

    # It is a PUT: what the document leaves out is gone.
    cli.out("network", "forward", "edit", "private", "192.0.2.10", input="description: only this\n")
    fwd = stored(api, "192.0.2.10")
    assert (fwd["description"], fwd["config"], fwd["ports"]) == ("only this", {}, [])

    before = stored(api, "192.0.2.10")
    assert cli.fail("network", "forward", "edit", "private", "192.0.2.10", input="ports: {a: 1}\n") == (
        "Error: Invalid YAML: ports must be a list of mappings"
    )
    assert cli.fail("network", "forward", "edit", "private", "192.0.2.10", input="listen_adress: x\n") == (
        "Error: Invalid YAML: unknown key(s) listen_adress (expected description, config, ports)"
    )
    assert cli.fail("network", "forward", "edit", "private", "192.0.2.10",
                    input="ports:\n- {protocol: tcp, listen_port: 80-80, target_address: 10.0.0.6}\n") == (
        "Error: Invalid listen port in port specification 0: End port should be higher than start port "
        "(400 HTTPBadRequest)"
    )  # fmt: skip
    assert stored(api, "192.0.2.10") == before


def run_in_terminal(argv: list[str], env: dict[str, str], keys: bytes, timeout: float = 60) -> tuple[int, str]:
    """Run `argv` with a pseudo-terminal as stdin/stdout/stderr, `keys` typed ahead; its exit code and output."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    try:
        os.write(master, keys)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{argv} did not finish within {timeout}s: {b''.join(chunks)!r}")
            ready, _, _ = select.select([master], [], [], remaining)
            if not ready:
                continue
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not data:
                break
            chunks.append(data)
        return proc.wait(timeout=timeout), b"".join(chunks).decode().replace("\r\n", "\n")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


EDITOR = """\
import pathlib, sys
path = pathlib.Path(sys.argv[1])
state = pathlib.Path(sys.argv[0]).with_suffix(".calls")
calls = int(state.read_text()) if state.exists() else 0
state.write_text(str(calls + 1))
pathlib.Path(sys.argv[0]).with_suffix(f".seen{calls}").write_text(path.read_text())
if calls == 0:
    path.write_text("ports: [{protocol: TCP, listen_port: '80', target_address: 10.0.0.6}]\\n")
else:
    path.write_text(path.read_text().replace("TCP", "tcp").replace("'80'", "'443'"))
"""


def test_edit_in_editor_on_a_terminal(server: RunningServer, api: httpx.Client, site: Site, tmp_path: Path) -> None:
    post(api, "private", {"listen_address": "192.0.2.10", "description": "old", "config": {"user.a": "1"}})
    editor = tmp_path / "editor.py"
    editor.write_text(EDITOR)
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(editor))}"
    env = {**os.environ, "EDITOR": command, "VISUAL": command, "CLOUDNET_URL": server.url, "NO_COLOR": "1"}
    cloudnet = str(Path(sys.executable).with_name("cloudnet"))
    # The first edit is refused by the server; Enter opens the editor again on what was written.
    code, output = run_in_terminal([cloudnet, "network", "forward", "edit", "private", "192.0.2.10"], env, b"\n")
    assert code == 0, output
    assert "Config parsing error: Invalid port protocol in port specification 0" in output
    assert "Press enter to open the editor again or ctrl+c to abort change" in output
    assert (tmp_path / "editor.calls").read_text() == "2"
    first = (tmp_path / "editor.seen0").read_text()
    assert first.startswith("### This is a YAML representation of the network forward.")
    assert yaml.safe_load(first) == {"listen_address": "192.0.2.10", "description": "old", "config": {"user.a": "1"},
                                     "ports": [], "location": ""}  # fmt: skip
    assert "protocol: TCP" in (tmp_path / "editor.seen1").read_text()  # reopened on the rejected text
    fwd = stored(api, "192.0.2.10")
    # The second round started from the rejected document, which had only ports: a PUT of just those.
    assert (fwd["description"], fwd["config"]) == ("", {})
    assert fwd["ports"] == [
        {"description": "", "protocol": "tcp", "listen_port": "443", "target_port": "", "target_address": "10.0.0.6"}
    ]


# -- port add / remove ---------------------------------------------------------------------------------------------


def test_port_add_and_remove(cli: Cli, api: httpx.Client, site: Site) -> None:
    post(api, "private", {"listen_address": "192.0.2.10", "config": {"target_address": "10.0.0.5"}})
    base = ("private", "192.0.2.10")
    assert cli.out("network", "forward", "port", "add", *base, "tcp", "80", "10.0.0.6", "8080",
                  "--description", "web") == ""  # fmt: skip
    cli.out("network", "forward", "port", "add", *base, "udp", "53", "10.0.0.7")
    cli.out("network", "forward", "port", "add", *base, "tcp", "443, 8443", "10.0.0.6")
    cli.out("network", "forward", "port", "add", *base, "tcp", "82-83,84", "10.0.0.8", "90,91-92")
    assert stored(api, "192.0.2.10")["ports"] == [
        {"description": "web", "protocol": "tcp", "listen_port": "80", "target_port": "8080",
         "target_address": "10.0.0.6"},
        {"description": "", "protocol": "udp", "listen_port": "53", "target_port": "", "target_address": "10.0.0.7"},
        {"description": "", "protocol": "tcp", "listen_port": "443,8443", "target_port": "",
         "target_address": "10.0.0.6"},
        {"description": "", "protocol": "tcp", "listen_port": "82-83,84", "target_port": "90,91-92",
         "target_address": "10.0.0.8"},
    ]  # fmt: skip
    assert table_dicts(cli.out("network", "forward", "list", "private"))[0]["Ports"] == "4"

    before = stored(api, "192.0.2.10")
    for args, message in (
        (("tcp", "80", "10.0.0.9"), 'Duplicate listen port 80 for protocol "tcp" in port specification 4'),
        (("TCP", "81", "10.0.0.9"), "Invalid port protocol in port specification 4, protocol must be one of: tcp, udp"),
        (("tcp", "81", "10.0.0.5"), "Target address is same as default target address in port specification 4"),
        (("tcp", "81", "10.0.0.9", "90-91"), "Mismatch of listen port(s) and target port(s) count in port spec"),
        (("tcp", "0", "10.0.0.9"), "Invalid listen port in port specification 4"),
        (("tcp", "81", "fd00::9"), "Cannot mix IP versions in listen address and port specification 4 target address"),
    ):
        line = cli.fail("network", "forward", "port", "add", *base, *args)
        assert message in line and line.endswith("(400 HTTPBadRequest)"), line
    assert stored(api, "192.0.2.10") == before

    # remove: by protocol and the exact listen ports; several matches need --force.
    assert cli.fail("network", "forward", "port", "remove", *base) == (
        "Error: Multiple ports match. Use --force to remove them all"
    )
    assert cli.fail("network", "forward", "port", "remove", *base, "tcp") == (
        "Error: Multiple ports match. Use --force to remove them all"
    )
    assert cli.fail("network", "forward", "port", "remove", *base, "tcp", "443") == ("Error: No matching port(s) found")
    assert cli.fail("network", "forward", "port", "remove", *base, "sctp") == "Error: No matching port(s) found"
    assert stored(api, "192.0.2.10") == before
    cli.out("network", "forward", "port", "remove", *base, "tcp", "443 , 8443")
    cli.out("network", "forward", "port", "remove", *base, "udp")
    assert [p["listen_port"] for p in stored(api, "192.0.2.10")["ports"]] == ["80", "82-83,84"]
    cli.out("network", "forward", "port", "remove", *base, "tcp", "--force")
    fwd = stored(api, "192.0.2.10")
    assert (fwd["ports"], fwd["config"]) == ([], {"target_address": "10.0.0.5"})
    assert cli.fail("network", "forward", "port", "remove", *base) == "Error: No matching port(s) found"

    # --force with a single match is fine, and removing everything at once too.
    cli.out("network", "forward", "port", "add", *base, "tcp", "80", "10.0.0.6")
    cli.out("network", "forward", "port", "remove", *base, "--force")
    cli.out("network", "forward", "port", "add", *base, "tcp", "80", "10.0.0.6")
    cli.out("network", "forward", "port", "add", *base, "udp", "80", "10.0.0.6")
    cli.out("network", "forward", "port", "remove", *base, "--force")
    assert stored(api, "192.0.2.10")["ports"] == []


def test_port_commands_on_ipv6(cli: Cli, api: httpx.Client, site: Site) -> None:
    cli.out("network", "forward", "create", "private", "2001:db8::10", "target_address=fd00::5")
    cli.out("network", "forward", "port", "add", "private", "2001:DB8::10", "tcp", "80,90-100", "FD00::6", "443")
    fwd = stored(api, "2001:db8::10")
    assert fwd["ports"] == [{"description": "", "protocol": "tcp", "listen_port": "80,90-100", "target_port": "443",
                             "target_address": "fd00::6"}]  # fmt: skip
    cli.out("network", "forward", "port", "remove", "private", "2001:db8::10", "tcp", "80,90-100")
    assert stored(api, "2001:db8::10")["ports"] == []
    cli.out("network", "forward", "delete", "private", "2001:db8:0::10")
    assert api.get(url("private")).json()["forwards"] == []


# -- network set / unset ---------------------------------------------------------------------------------------


def test_network_set_merges_config_and_unset_removes(cli: Cli, api: httpx.Client, site: Site) -> None:
    net_id = site.networks["private"]["id"]

    def config() -> Json:
        return dict(api.get(f"/networks/{net_id}").json()["network"]["config"])

    assert cli.out("network", "set", "private", "ipv4.nat.address=192.0.2.9", "user.a=x=y") == ""
    assert config() == {"ipv4.nat.address": "192.0.2.9", "user.a": "x=y"}
    cli.out("network", "set", "private", "--set", "ipv6.nat.address=2001:DB8::9")
    assert config() == {"ipv4.nat.address": "192.0.2.9", "ipv6.nat.address": "2001:db8::9", "user.a": "x=y"}
    cli.out("network", "set", "private", "user.b", "two words")  # LXD's KEY VALUE form
    assert config()["user.b"] == "two words"
    cli.out("network", "set", "private", "user.b=")  # an empty value removes the key
    assert "user.b" not in config()
    cli.out("network", "unset", "private", "ipv6.nat.address", "user.a")
    assert config() == {"ipv4.nat.address": "192.0.2.9"}

    before = config()
    assert cli.fail("network", "set", "private", "ipv4.nat.address=203.0.113.9") == (
        'Error: Uplink network does not contain "203.0.113.9" in its routes (400 HTTPBadRequest)'
    )
    assert cli.fail("network", "set", "private", "bogus=1") == 'Error: Invalid option "bogus" (400 HTTPBadRequest)'
    assert (
        cli.fail("network", "unset", "private", "user.a=1")
        == "Error: KEY 'user.a=1': expected a config key without '='"
    )
    assert cli.fail("network", "unset", "nope", "user.a") == "Error: No network found for 'nope'"
    assert config() == before
    # The network's own forward may listen on its SNAT address.
    assert cli.out("network", "forward", "create", "private", "192.0.2.9") == "Network forward 192.0.2.9 created\n"
