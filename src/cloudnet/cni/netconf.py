"""What a runtime gives the plugin: CNI_* environment variables and the network configuration on stdin, checked
and bounded before anything is done with them (a bad variable is code 4, a bad configuration code 7)."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import re
import socket
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudnet.cni.errors import INCOMPATIBLE_VERSION, INVALID_CONFIG, INVALID_ENV, CniError

SUPPORTED_VERSIONS = ("1.0.0", "1.1.0")
LATEST = SUPPORTED_VERSIONS[-1]
COMMANDS = ("ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION")
MAX_STDIN = 1 << 20  # a configuration (with its prevResult or GC list) is a few KiB; more is refused unread
MAX_DEPTH = 32
MAX_ARGS = 4096
MAX_LIST = 100_000
DEFAULT_URL = "http://127.0.0.1:9696"
# Beside the runtimes' default configuration directory; libcni reads only *.conf, *.conflist and *.json there.
DEFAULT_TOKEN_FILE = "/etc/cni/net.d/cloudnet-cni.token"
OPEN_MODE_TOKEN = "admin"  # what the CLI sends too: accepted only by a server without a tokens file
DEFAULT_TIMEOUT = 30.0
MAX_TIMEOUT = 300.0
CONTAINER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,254}$")
IFNAME = re.compile(r"^[A-Za-z0-9_.\-]{1,15}$")
PHYSNET = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
TOKEN = re.compile(r"^[\x21-\x7e]{1,1024}$")


@dataclass(frozen=True)
class Env:
    command: str
    container_id: str = ""
    netns: str = ""
    ifname: str = ""
    args: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NetConf:
    cni_version: str
    name: str
    network: str
    url: str
    token: str
    host: str
    project: str | None
    security_groups: tuple[str, ...]
    port: str | None
    physnet: str | None  # an SR-IOV VF of this physical network (a `direct` port), not a veth
    fixed_ips: tuple[str, ...]
    timeout: float
    prev_result: dict[str, Any] | None
    valid_attachments: frozenset[tuple[str, str]]
    # Which plugin made an instance (its description starts so; its name with the part after "cloudnet-"): the
    # netavark plugin's instances are never a CNI configuration's, whatever the names.
    mark: str = "cloudnet-cni"
    valid_containers: frozenset[str] | None = None  # GC by container alone (netavark: the runtime's container list)
    # Kuryr's nested mode (nested.py): (the trunk parent's interface, the namespace holding it; None: the plugin's)
    nested: tuple[str, str | None] | None = None


def read_env(environ: Mapping[str, str]) -> Env:
    command = environ.get("CNI_COMMAND", "")
    if command not in COMMANDS:
        raise CniError(INVALID_ENV, f"CNI_COMMAND must be one of {', '.join(COMMANDS)}", command[:64])
    if command in ("VERSION", "STATUS", "GC"):
        return Env(command)
    container_id, ifname, netns = (environ.get(k, "") for k in ("CNI_CONTAINERID", "CNI_IFNAME", "CNI_NETNS"))
    env = attachment(command, container_id, ifname, netns, ("CNI_CONTAINERID", "CNI_IFNAME", "CNI_NETNS"))
    return Env(command, env.container_id, env.netns, env.ifname, _cni_args(environ.get("CNI_ARGS", "")))


def attachment(command: str, container_id: str, ifname: str, netns: str, labels: tuple[str, str, str]) -> Env:
    """An attachment's container id, interface name and namespace path, checked; `labels` name where each came
    from in the messages (the CNI variables, or the netavark plugin's fields)."""
    if not CONTAINER_ID.match(container_id):
        raise CniError(INVALID_ENV, f"{labels[0]} must be 1-255 letters, digits, '_', '.' or '-'", container_id[:64])
    if not IFNAME.match(ifname) or ifname in (".", ".."):
        raise CniError(INVALID_ENV, f"{labels[1]} must be an interface name (1-15 letters, digits, '_', '.', '-')",
                       ifname[:64])  # fmt: skip
    if ifname == "lo":
        raise CniError(INVALID_ENV, f"{labels[1]} lo is the namespace's loopback")
    if command != "DEL" or netns:
        netns = _netns_path(netns, labels[2])
    return Env(command, container_id, netns, ifname)


def _netns_path(value: str, label: str) -> str:
    if not value.startswith("/") or len(value) > 4096 or "\x00" in value or any(c.isspace() for c in value):
        raise CniError(INVALID_ENV, f"{label} must be the absolute path of a network namespace", value[:256])
    return value


def _cni_args(text: str) -> tuple[tuple[str, str], ...]:
    """`K=V;K2=V2`. Unknown keys are ignored (runtimes pass their own); a token never travels here."""
    if len(text) > MAX_ARGS:
        raise CniError(INVALID_ENV, f"CNI_ARGS is over {MAX_ARGS} characters")
    pairs = []
    for item in filter(None, text.split(";")):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CniError(INVALID_ENV, "CNI_ARGS must be KEY=VALUE pairs separated by ';'", item[:64])
        if "token" in key.lower():
            raise CniError(INVALID_ENV, "CNI_ARGS may not carry a token: give token_file in the network configuration")
        pairs.append((key, value))
    return tuple(pairs)


def parse_stdin(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_STDIN:
        raise CniError(INVALID_CONFIG, f"network configuration over {MAX_STDIN} bytes")
    try:
        conf = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise CniError(INVALID_CONFIG, "network configuration is not JSON", str(exc)[:200]) from None
    if not isinstance(conf, dict):
        raise CniError(INVALID_CONFIG, "network configuration must be a JSON object")
    if _depth(conf) > MAX_DEPTH:
        raise CniError(INVALID_CONFIG, f"network configuration nested deeper than {MAX_DEPTH}")
    return conf


def _depth(value: Any) -> int:
    depth, level = 0, [value]
    while level:
        depth += 1
        level = [v for item in level if isinstance(item, dict | list)
                 for v in (item.values() if isinstance(item, dict) else item)]  # fmt: skip
    return depth - 1


def version_of(conf: dict[str, Any]) -> str:
    version = conf.get("cniVersion")
    if not isinstance(version, str) or not version:
        raise CniError(INVALID_CONFIG, "cniVersion is required")
    if version not in SUPPORTED_VERSIONS:
        raise CniError(INCOMPATIBLE_VERSION, f"cniVersion {version[:32]} is not supported",
                       f"supported: {', '.join(SUPPORTED_VERSIONS)}")  # fmt: skip
    return version


def _text(conf: Mapping[str, Any], key: str, default: str | None = None, limit: int = 255) -> str | None:
    value = conf.get(key, default)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > limit or "\x00" in value:
        raise CniError(INVALID_CONFIG, f"{key} must be a string of 1-{limit} characters")
    return value


def _object(conf: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = conf.get(key) or {}
    if not isinstance(value, dict):
        raise CniError(INVALID_CONFIG, f"{key} must be an object")
    return value


def _strings(value: Any, key: str, limit: int = 100) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > limit or not all(isinstance(v, str) and 0 < len(v) <= 255
                                                                     for v in value):  # fmt: skip
        raise CniError(INVALID_CONFIG, f"{key} must be a list of at most {limit} names")
    return tuple(value)


def read_netconf(conf: dict[str, Any], command: str) -> NetConf:
    version = version_of(conf)
    name = _text(conf, "name")
    network = _text(conf, "network")
    if name is None or network is None:
        raise CniError(INVALID_CONFIG, "the network configuration needs 'name' and 'network' (a cloudnet network)")
    url = _text(conf, "url", DEFAULT_URL, 2048) or DEFAULT_URL
    if not re.match(r"^https?://[^\s]+$", url):
        raise CniError(INVALID_CONFIG, "url must be an http:// or https:// URL")
    # The plugin's own options: under args.cloudnet (e.g. from a runtime's annotations) or at the top.
    options = _object(_object(conf, "args"), "cloudnet")
    runtime = _object(conf, "runtimeConfig")
    timeout = conf.get("timeout", DEFAULT_TIMEOUT)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= MAX_TIMEOUT:
        raise CniError(INVALID_CONFIG, f"timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}]")
    prev = conf.get("prevResult")
    if prev is not None and not isinstance(prev, dict):
        raise CniError(INVALID_CONFIG, "prevResult must be an object")
    return NetConf(
        cni_version=version, name=name, network=network, url=url,
        token=_token(conf) if command != "VERSION" else "",
        host=_text(conf, "host") or socket.gethostname(),
        project=_text(options, "project") or _text(conf, "project"),
        security_groups=_strings(options.get("security_groups", conf.get("security_groups")), "security_groups"),
        port=_text(options, "port") or _text(runtime, "port"),
        physnet=_physnet(_text(options, "physnet", limit=64) or _text(runtime, "physnet", limit=64)
                         or _text(conf, "physnet", limit=64)),
        fixed_ips=_fixed_ips(runtime.get("ips")),
        timeout=float(timeout), prev_result=prev,
        valid_attachments=_attachments(conf.get("cni.dev/valid-attachments")) if command == "GC" else frozenset(),
        nested=_nested(options.get("nested", conf.get("nested"))),
    )  # fmt: skip


def _nested(value: Any) -> tuple[str, str | None] | None:
    """`"nested": {"link": "eth0"}` (the VM's interface on its trunk's parent port; `netns`: the namespace holding
    it when not the plugin's own, e.g. a node that is itself a container)."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"link", "netns"}:
        raise CniError(INVALID_CONFIG, "nested must be an object with link (and netns)")
    link = value.get("link")
    if not isinstance(link, str) or not IFNAME.match(link) or link in (".", "..", "lo"):
        raise CniError(INVALID_CONFIG, "nested.link must be an interface name")
    netns = value.get("netns")
    if netns is not None and (not isinstance(netns, str) or not netns.startswith("/") or len(netns) > 4096
                              or "\x00" in netns or any(c.isspace() for c in netns)):  # fmt: skip
        raise CniError(INVALID_CONFIG, "nested.netns must be the absolute path of a network namespace")
    return link, netns


def with_args_ips(spec: NetConf, args: tuple[tuple[str, str], ...]) -> NetConf:
    """CNI_ARGS' IP (comma-separated: the convention host-local reads, and how podman 4 passes `podman run --ip`)
    when runtimeConfig.ips gives none."""
    given = [v for k, v in args if k == "IP"]
    if spec.fixed_ips or not given:
        return spec
    return dataclasses.replace(spec, fixed_ips=_fixed_ips([ip for v in given for ip in v.split(",")]))


def _physnet(value: str | None) -> str | None:
    if value is not None and not PHYSNET.match(value):
        raise CniError(INVALID_CONFIG, "physnet must be a physical network name (letters, digits, '_', '.', '-')")
    return value


def _fixed_ips(value: Any) -> tuple[str, ...]:
    """runtimeConfig.ips (the `ips` capability), as bare addresses."""
    found = []
    for text in _strings(value, "runtimeConfig.ips", 2):
        try:
            found.append(str(ipaddress.ip_interface(text).ip))
        except ValueError:
            raise CniError(INVALID_CONFIG, f"runtimeConfig.ips: {text[:64]} is not an IP address") from None
    return tuple(found)


def _attachments(value: Any) -> frozenset[tuple[str, str]]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or len(value) > MAX_LIST:
        raise CniError(INVALID_CONFIG, "cni.dev/valid-attachments must be a list")
    found = set()
    for item in value:
        cid, ifname = (item.get("containerID"), item.get("ifname")) if isinstance(item, dict) else (None, None)
        if not isinstance(cid, str) or not isinstance(ifname, str):
            raise CniError(INVALID_CONFIG, "cni.dev/valid-attachments: each needs containerID and ifname")
        found.add((cid, ifname))
    return frozenset(found)


def _token(conf: Mapping[str, Any]) -> str:
    """The token from the configuration, else from its file (mode 0600, one line), else the open mode's."""
    if "token" in conf:
        token = conf["token"]
        if not isinstance(token, str) or not TOKEN.match(token):
            raise CniError(INVALID_CONFIG, "token must be printable ASCII without spaces")
        return token
    given = _text(conf, "token_file", None, 4096)
    return read_token_file(Path(given or DEFAULT_TOKEN_FILE), required=bool(given))


def read_token_file(path: Path, required: bool) -> str:
    """The token in `path` (mode 0600, one line); the open mode's when the file is missing and not `required`.
    (The OCI hook reads the runtime's token the same way.)"""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if required:
            raise CniError(INVALID_CONFIG, f"token_file {path} does not exist") from None
        return OPEN_MODE_TOKEN
    except OSError as exc:
        raise CniError(INVALID_CONFIG, f"token_file {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
            raise CniError(INVALID_CONFIG, f"token_file {path} must be a regular file readable by its owner only")
        text = f.read(4097).decode("ascii", "replace").strip()
    if not TOKEN.match(text):
        raise CniError(INVALID_CONFIG, f"token_file {path} must hold one token (printable ASCII, one line)")
    return text
