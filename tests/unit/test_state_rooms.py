"""state/ by concern: each sub-package one job, imports running down only, nothing of perfloop's
imported from outside state/ (tests/unit/test_decision_rooms.py does the same for agent/decision/)."""

import ast
import importlib
from pathlib import Path

STATE = Path(__file__).resolve().parents[2] / "state"
RANK = {"engines": 0, "measurement": 0, "proposers": 0, "profiling": 1, "config": 1, "sessions": 2, "door": 3}
"""A sub-package imports only `state.base`, itself and sub-packages of a lower rank."""


def imports(root: Path) -> dict[str, set[str]]:
    """Per sub-package of `root`, the top-level modules and state sub-packages its modules import."""
    out: dict[str, set[str]] = {}
    for package in (p for p in root.iterdir() if (p / "__init__.py").is_file()):
        found = out.setdefault(package.name, set())
        for path in package.glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
                found |= {n.split(".")[1] if n.startswith("state.") else n.split(".")[0] for n in names}
    return out


def upward(root: Path) -> list[tuple[str, str]]:
    """(importer, imported) pairs that break the ranks, or reach outside state/ into perfloop."""
    ours = {"agent", "tools", "playbooks", "benchmarks"}
    return sorted(
        (a, b)
        for a, bs in imports(root).items()
        for b in bs
        if b in ours or (b in RANK and b != a and RANK[b] >= RANK[a])
    )


def test_every_sub_package_is_known_and_imports_only_those_below_it():
    assert set(imports(STATE)) == set(RANK), "a new sub-package: give it a rank here and a docstring"
    assert upward(STATE) == []


def test_each_sub_package_is_small_and_says_its_job_what_it_imports_and_what_imports_it():
    for package in RANK:
        modules = [p for p in (STATE / package).glob("*.py") if p.name != "__init__.py"]
        assert 1 <= len(modules) <= 12, (package, len(modules))
        doc = importlib.import_module(f"state.{package}").__doc__ or ""
        assert "Imports " in doc and "mported by" in doc, package


def test_an_import_upward_or_out_of_state_is_seen(tmp_path: Path):
    bodies = {
        "engines": "from state.sessions.loop import LoopState\n",
        "sessions": "from state.engines.ssh import SSHHostConfig\nfrom state.base import Model\n",
        "door": "from tools.errors import ConfigError\n",
    }
    for package, body in bodies.items():
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text('"""x"""\n')
        (tmp_path / package / "m.py").write_text(body)
    assert upward(tmp_path) == [("door", "tools"), ("engines", "sessions")]
