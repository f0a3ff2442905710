"""The import graph of src/cloudnet: no circles, no arrow from a lower layer to a higher one, no big modules.

The layers are the ones README.md's "Architecture" section draws. Imports are read from the source (every
`import`/`from ... import`, at any depth, so an import tucked inside a function counts like any other).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
MAX_LINES = 500

# Lowest first. A module belongs to the longest prefix listed; it may import its own layer and the layers
# below it on its own side, and the shared layer. The control plane and the host side never import each other.
SHARED = ["cloudnet", "cloudnet.errors", "cloudnet.namespaces", "cloudnet.config", "cloudnet.metrics", "cloudnet.wire",
          "cloudnet.heap", "cloudnet.ovn", "cloudnet.pki", "cloudnet.vlan_bpf"]  # fmt: skip
CONTROL = ["cloudnet.store", "cloudnet.services", "cloudnet.northbound", "cloudnet.metadata", "cloudnet.api"]
HOST = ["cloudnet.dataplane", "cloudnet.dataplane.drivers", "cloudnet.agent"]
ENTRY = ["cloudnet.api_socket", "cloudnet.api_tls", "cloudnet.ovn_stack", "cloudnet.server", "cloudnet.docker",
         "cloudnet.cli", "cloudnet.cni", "cloudnet.netavark"]  # fmt: skip
# Drivers sit between the generic dataplane and the selector; they never import each other.
DRIVERS = ["cloudnet.dataplane.linux", "cloudnet.dataplane.sriov", "cloudnet.dataplane.ovn"]


def modules() -> dict[str, Path]:
    found = {}
    for path in (SRC / "cloudnet").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if "migrations" not in parts:  # Alembic's scripts are loaded by Alembic, not imported
            found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imported(name, path, known)) for name, path in known.items()}


def place(module: str) -> tuple[str, int, str]:
    """(side, rank, layer) of a module: the longest listed prefix wins."""
    best: tuple[str, int, str] = ("", -1, "")
    for side, layers in (("shared", SHARED), ("control", CONTROL), ("host", HOST), ("entry", ENTRY)):
        for rank, layer in enumerate(layers):
            exact = layer == "cloudnet"
            if (module == layer or (not exact and module.startswith(layer + "."))) and len(layer) > len(best[2]):
                best = (side, rank, layer)
    for driver in DRIVERS:
        if module == driver or module.startswith(driver + "."):
            return ("host", 0, driver)  # between the generic dataplane and the selector: see allowed()
    assert best[2], f"{module} belongs to no layer: add its package to the layer lists (and to README.md)"
    return best


def allowed(source: str, target: str) -> bool:
    s_side, s_rank, s_layer = place(source)
    t_side, t_rank, t_layer = place(target)
    if t_side == "shared":
        return s_side != "shared" or SHARED.index(t_layer) <= SHARED.index(s_layer) or t_layer == "cloudnet"
    if s_side == "entry":
        return t_side != "entry" or t_rank <= s_rank
    if s_side != t_side:
        return False
    s_driver, t_driver = s_layer in DRIVERS, t_layer in DRIVERS
    if s_driver or t_driver:
        if s_driver and t_driver:
            return s_layer == t_layer
        if s_driver:  # a driver uses the generic dataplane only
            return t_layer == "cloudnet.dataplane"
        return s_layer == "cloudnet.dataplane.drivers"  # only the selector names a driver
    return t_rank <= s_rank


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circles() -> None:
    assert cycles(graph()) == []


def test_arrows_point_down() -> None:
    wrong = sorted(f"{source} -> {target}" for source, targets in graph().items() for target in targets
                   if not allowed(source, target))  # fmt: skip
    assert wrong == []


def test_no_module_over_the_limit() -> None:
    big = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert big == {}


def test_the_checks_can_fail() -> None:
    """The rules above catch what they are for (on a made-up graph, so this fails if the rules go soft)."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert not allowed("cloudnet.store.db", "cloudnet.services.ports.ports")
    assert not allowed("cloudnet.services.ports.ports", "cloudnet.api.app")
    assert not allowed("cloudnet.metadata.server", "cloudnet.agent.client")
    assert not allowed("cloudnet.agent.run", "cloudnet.services.hosts.hosts")
    assert not allowed("cloudnet.dataplane.linux.driver", "cloudnet.dataplane.sriov.driver")
    assert not allowed("cloudnet.dataplane.base", "cloudnet.dataplane.linux.driver")
    assert not allowed("cloudnet.agent.agent", "cloudnet.dataplane.linux.driver")
    assert not allowed("cloudnet.wire.http1", "cloudnet.metadata.server")
    assert allowed("cloudnet.agent.run", "cloudnet.dataplane.drivers")
    assert allowed("cloudnet.dataplane.drivers", "cloudnet.dataplane.linux.driver")
    assert allowed("cloudnet.dataplane.sriov.driver", "cloudnet.dataplane.base")
    assert allowed("cloudnet.api.app", "cloudnet.store.db")
    assert allowed("cloudnet.cli.main", "cloudnet.server")
