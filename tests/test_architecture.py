"""The tree keeps the shape docs/DEVELOPERS.md draws: rooms that import only downwards, and a map
that names every room there is."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPS = {"analysis": "slowdown.analysis", "probe": "slowdown.probe"}

# Each room's rank: a module may import its own room and rooms of a lower rank, nothing else.
RANKS = {
    "slowdown.analysis.units": 0,
    "slowdown.analysis.words": 0,
    "slowdown.analysis.machine": 0,
    "slowdown.analysis.atomic_write": 0,
    "slowdown.analysis.histogram": 1,
    "slowdown.analysis.store": 2,
    "slowdown.analysis.stats": 3,
    "slowdown.analysis.config": 4,
    "slowdown.analysis.alerts": 5,
    "slowdown.analysis.fio": 5,
    "slowdown.analysis.report": 5,
    "slowdown.analysis.view": 5,
    "slowdown.analysis.cli": 6,
    # The probe's rooms stand above every analysis room but its command line, which they
    # never import (an equal rank: neither side imports the other).
    "slowdown.probe": 6,
    "slowdown.probe.layout": 6,
    "slowdown.probe.locks": 7,
    "slowdown.probe.servers": 7,
    "slowdown.probe.probes": 8,
    "slowdown.probe.workspaces": 9,
    "slowdown.probe.runtime": 9,
    "slowdown.probe.exporters": 10,
    "slowdown.probe.daemon": 11,
    "slowdown.probe.command": 12,
}


def _modules() -> dict[str, Path]:
    out = {}
    for top, package in TOPS.items():
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT / top).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


def _room(module: str) -> str:
    return max((r for r in RANKS if module == r or module.startswith(r + ".")), key=len)


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("slowdown.")}


def test_every_module_belongs_to_a_room_and_imports_only_downwards():
    wrong = []
    for module, path in _modules().items():
        if module in TOPS.values():
            continue
        room = _room(module)
        for name in _imports(path):
            other = _room(name)
            if other != room and RANKS[other] >= RANKS[room]:
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_no_relative_imports():
    """Absolute imports only: a module's imports read the same wherever it is moved from."""
    relative = [str(p.relative_to(ROOT)) for p in _modules().values()
                if any(isinstance(n, ast.ImportFrom) and n.level
                       for n in ast.walk(ast.parse(p.read_text())))]
    assert not relative


def _map_entries() -> set[str]:
    text = (ROOT / "docs" / "DEVELOPERS.md").read_text()
    block = text.split("```", 2)[1]  # the first code block is the map
    return set(re.findall(r"^\s*((?:analysis|probe)(?:/[\w.]+)*/?)\s", block, re.M))


def test_the_map_names_every_package_and_only_packages_that_exist():
    named = {entry.rstrip("/") for entry in _map_entries()}
    packages = {str(p.parent.relative_to(ROOT)) for top in TOPS
                for p in (ROOT / top).rglob("__init__.py")}
    top_modules = {str(p.relative_to(ROOT)) for p in (ROOT / "analysis").glob("*.py")
                   if p.name != "__init__.py"}
    assert packages - named == set(), "packages missing from the map"
    assert top_modules - named == set(), "top-level modules missing from the map"
    assert named - packages - top_modules == set(), "the map names what does not exist"


def test_every_package_states_its_contract():
    missing = [str(p.relative_to(ROOT)) for top in TOPS for p in (ROOT / top).rglob("__init__.py")
               if len((ast.get_docstring(ast.parse(p.read_text())) or "").split()) < 12]
    assert not missing


# Beside the package: the suite, the benchmarks and the data both build.
SIDES = ("tests", "bench", "testdata")


def _side_modules() -> dict[str, Path]:
    out = {}
    for top in SIDES:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _all_imports(path: Path) -> set[str]:
    """Every module a file imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_no_module_over_500_lines():
    long = {str(p.relative_to(ROOT)): n
            for p in [*_modules().values(), *_side_modules().values()]
            if (n := len(p.read_text().splitlines())) > 500}
    assert not long


def _is_test_module(name: str) -> bool:
    return name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")


def test_no_test_module_imports_another():
    """What two test modules share lives in tests/kit/."""
    wrong = [f"{path.relative_to(ROOT)} imports {name}"
             for module, path in _side_modules().items() if module.startswith("tests.")
             for name in _all_imports(path) if _is_test_module(name)]
    assert not wrong, "\n".join(wrong)


def test_tests_and_bench_do_not_import_each_other():
    """A smoke test runs a benchmark as a process; what both build lives in testdata/, which
    imports neither."""
    forbidden = {"tests": {"bench"}, "bench": {"tests"}, "testdata": {"tests", "bench"}}
    wrong = [f"{path.relative_to(ROOT)} imports {name}"
             for module, path in _side_modules().items()
             for name in _all_imports(path)
             if name.split(".")[0] in forbidden[module.split(".")[0]]]
    assert not wrong, "\n".join(wrong)


def test_every_package_is_installed():
    """A package left out of setup.cfg works in an editable install and in no other: a
    package's service would fail every op on an ImportError in its worker."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    listed = set(cfg["options"]["packages"].split())
    found = {".".join([TOPS[top], *init.parent.relative_to(ROOT / top).parts])
             for top in TOPS for init in (ROOT / top).rglob("__init__.py")}
    assert found == listed, (sorted(found - listed), sorted(listed - found))
