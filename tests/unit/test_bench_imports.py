"""Every benchmark still imports, and every `module.name` it uses exists: they run by hand, outside the suite, so a
moved function would otherwise break them unseen (bench/desired_state.py called services/hosts/hosts.py's desired_state
after it moved to services/hosts/host_state.py)."""

from __future__ import annotations

import ast
import importlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench_path() -> Iterator[None]:
    sys.path.insert(0, str(BENCH))  # (benches import their neighbours by bare name: common, ovn_common)
    try:
        yield
    finally:
        sys.path.remove(str(BENCH))


def missing_attributes(module: types.ModuleType, tree: ast.Module) -> list[str]:
    """`alias.name` uses in `tree` whose alias is a module the bench imported and that has no such name."""
    modules = {name: value for name, value in vars(module).items() if isinstance(value, types.ModuleType)}
    return sorted(
        f"{node.value.id}.{node.attr} (line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
        and not hasattr(modules[node.value.id], node.attr)
    )  # fmt: skip


@pytest.mark.parametrize("name", sorted(p.stem for p in BENCH.glob("*.py")))
def test_bench_imports_and_uses_only_what_exists(name: str, bench_path: None) -> None:
    module = importlib.import_module(name)
    assert module.__file__ == str(BENCH / f"{name}.py")
    assert missing_attributes(module, ast.parse((BENCH / f"{name}.py").read_text())) == []
