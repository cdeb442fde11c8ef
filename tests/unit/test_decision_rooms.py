"""agent/decision/ by concern: each room a sub-package with one job, imports running down only,
the statistics pure, and the docs' diagram of the rooms drawn from the imports."""

import ast
import importlib
from pathlib import Path

from agent.diagram import DECISION, ROOMS_FENCE, ROOMS_SHOWN_IN, room_imports, rooms_mermaid, stale

RANK = {"judging": 0, "stats": 0, "gate": 1, "arms": 2, "calibration": 3, "rules": 4}
"""Lower rooms never import higher ones (`judging` is the seam's types, below every room)."""


def test_every_room_is_known_and_imports_only_rooms_below_it():
    edges = room_imports()
    assert set(edges) == set(RANK), "a new room: give it a rank here and a paragraph in its docstring"
    upward = [(a, b) for a, bs in edges.items() for b in bs if RANK[b] >= RANK[a]]
    assert upward == []


def test_the_statistics_are_pure():
    for path in (DECISION / "stats").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                within = node.module.startswith("agent.decision.stats.")
                top = node.module.split(".")[0]
                assert within or top not in {"agent", "tools", "langgraph", "playbooks"}, (
                    path.name,
                    node.module,
                )


def test_each_room_is_small_and_says_its_job_and_what_it_may_import():
    for room in ("stats", "gate", "arms", "calibration", "rules"):
        modules = [p for p in (DECISION / room).glob("*.py") if p.name != "__init__.py"]
        assert 1 <= len(modules) <= 8, (room, len(modules))
        doc = importlib.import_module(f"agent.decision.{room}").__doc__ or ""
        assert "May import" in doc and "mported by" in doc, room


def test_the_docs_show_the_rooms_as_the_imports_are():
    assert stale(ROOMS_SHOWN_IN, ROOMS_FENCE) == [], "rooms changed: run `python -m agent.diagram`"
    assert "    rules --> calibration;\n" in rooms_mermaid()


def test_a_room_importing_upward_is_seen(tmp_path: Path):
    for room, body in {"stats": "from agent.decision.arms.x import y\n", "arms": "import math\n"}.items():
        (tmp_path / room).mkdir()
        (tmp_path / room / "m.py").write_text(body)
    assert room_imports(tmp_path) == {"stats": {"arms"}, "arms": set()}
