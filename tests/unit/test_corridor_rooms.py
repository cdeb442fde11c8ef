"""tools/trace/ and agent/proposer/ by concern: each room a sub-package with one job, imports
running down only, and each room's docstring naming what it may import, checked against the code."""

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("agent", "tools", "state", "playbooks")
RANKS = {
    "tools.trace": {"read": 0, "compare": 0, "analyses": 1, "ranks": 2},
    "agent.proposer": {"edits": 0, "tuning": 0, "briefing": 1, "chat": 2, "harness": 3},
}
"""Each package's rooms; a room imports only rooms of a lower rank."""


def imported(path: Path) -> set[str]:
    """The modules of ours that a file imports (`from a.b import c` counts as `a.b.c` too, since c
    may be a module)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return {m for m in out if m.split(".")[0] in OURS}


def room_imports(package: str, root: Path | None = None) -> dict[str, set[str]]:
    """Each room of `package` (a sub-package of its directory, `root` by default the package's
    own) and the other rooms its modules import."""
    base = root or ROOT.joinpath(*package.split("."))
    edges: dict[str, set[str]] = {}
    for room in sorted(p for p in base.iterdir() if (p / "__init__.py").exists()):
        edges[room.name] = set()
        for path in room.rglob("*.py"):
            for mod in imported(path):
                if mod.startswith(package + "."):
                    other = mod.split(".")[package.count(".") + 1]
                    if other != room.name and (base / other / "__init__.py").exists():
                        edges[room.name].add(other)
    return edges


@pytest.mark.parametrize("package", sorted(RANKS))
def test_every_room_is_known_and_imports_only_rooms_below_it(package: str):
    edges = room_imports(package)
    assert set(edges) == set(RANKS[package]), "a new room: give it a rank here and a docstring"
    rank = RANKS[package]
    assert [(a, b) for a, bs in edges.items() for b in bs if rank[b] >= rank[a]] == []


@pytest.mark.parametrize("package", sorted(RANKS))
def test_each_room_is_small_and_imports_only_what_its_docstring_allows(package: str):
    for room in RANKS[package]:
        here = f"{package}.{room}"
        modules = [p for p in ROOT.joinpath(*here.split(".")).glob("*.py") if p.name != "__init__.py"]
        assert 2 <= len(modules) <= 8, (here, len(modules))
        doc = importlib.import_module(here).__doc__ or ""
        assert "May import" in doc and "mported by" in doc, here
        allowed = doc.split("May import", 1)[1].split("mported by", 1)[0]
        names = [f"{package}.{n}" if n in RANKS[package] else n for n in re.findall(r"`([\w.]+)`", allowed)]
        for path in modules:
            for mod in imported(path):
                ok = (
                    mod in (here, package)
                    or mod.startswith(here + ".")
                    or any(mod == n or mod.startswith(n + ".") for n in names)
                )
                assert ok, f"{path.relative_to(ROOT)} imports {mod}; {here}'s docstring allows {names}"


def test_the_pure_rooms_reach_no_door_and_no_model():
    for room in ("edits", "tuning"):
        for path in ROOT.joinpath("agent", "proposer", room).glob("*.py"):
            door = {
                m for m in imported(path) if m.startswith(("agent.context", "tools.door", "tools.llm.code"))
            }
            assert door == set(), (path.name, door)


def test_a_room_importing_upward_is_seen(tmp_path: Path):
    for room, body in {"read": "from tools.trace.ranks.merge import x\n", "ranks": "import math\n"}.items():
        (tmp_path / room).mkdir()
        (tmp_path / room / "__init__.py").write_text("")
        (tmp_path / room / "m.py").write_text(body)
    assert room_imports("tools.trace", tmp_path) == {"read": {"ranks"}, "ranks": set()}
