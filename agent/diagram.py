"""The docs' diagrams, drawn from the code where the docs show them: the loop's (LangGraph draws it
from the compiled graph) and the decision rooms' (the imports between `agent/decision`'s
sub-packages, read with `ast`).

`python -m agent.diagram` rewrites the ```` ```mermaid ```` block (the loop) and the
```` ```mermaid decision-rooms ```` block of each file in SHOWN_IN / ROOMS_SHOWN_IN; `--check`
changes nothing and exits 1 naming the stale files. tests/unit/test_graph.py and
tests/unit/test_decision_rooms.py fail when a copy no longer matches the code.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from agent.graph import graph

ROOT = Path(__file__).resolve().parents[1]
SHOWN_IN = (ROOT / "docs" / "ARCHITECTURE.md", ROOT / "agent" / "graph.py")
"""Files holding the diagram, each in one ```` ```mermaid ```` block."""
FENCE = "```mermaid\n"
ROOMS_SHOWN_IN = (ROOT / "docs" / "ARCHITECTURE.md", ROOT / "agent" / "decision" / "__init__.py")
"""Files holding the decision rooms' diagram, each in one ```` ```mermaid decision-rooms ```` block."""
ROOMS_FENCE = "```mermaid decision-rooms\n"
DECISION = ROOT / "agent" / "decision"


def mermaid() -> str:
    """The compiled graph as mermaid (edges only: dotted = routed by a node's Command)."""
    drawn = graph.get_graph().draw_mermaid(with_styles=False)
    return "".join(line.replace("\t", "    ").rstrip() + "\n" for line in drawn.splitlines())


def room_imports(root: Path = DECISION) -> dict[str, set[str]]:
    """Each room of `agent/decision` (a sub-package, or `judging` beside them) and the rooms its
    modules import (pure but for reading the files)."""
    edges: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if len(rel) == 1 and rel[0] == "__init__.py":
            continue
        room = rel[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agent.decision."):
                other = node.module.split(".")[2]
                if other != room:
                    edges.setdefault(room, set()).add(other)
            edges.setdefault(room, set())
    return edges


def rooms_mermaid(root: Path = DECISION) -> str:
    """The rooms and their imports as mermaid (an arrow: imports)."""
    edges = room_imports(root)
    lines = ["flowchart TD\n"] + [f"    {a} --> {b};\n" for a in sorted(edges) for b in sorted(edges[a])]
    return "".join(lines)


def with_diagram(text: str, diagram: str, fence: str = FENCE) -> str:
    """`text` with its `fence` block's body replaced by `diagram` (pure); ValueError without one."""
    if text.count(fence) != 1:
        raise ValueError(f"expected exactly one {fence.strip()} block, found {text.count(fence)}")
    start = text.index(fence) + len(fence)
    end = text.find("```", start)
    if end < 0:
        raise ValueError(f"the {fence.strip()} block is not closed with ```")
    return text[:start] + diagram + text[end:]


def stale(files: tuple[Path, ...] = SHOWN_IN, fence: str = FENCE) -> list[Path]:
    """The files whose diagram (the loop's, or the rooms' for ROOMS_FENCE) differs from the code's."""
    diagram = mermaid() if fence == FENCE else rooms_mermaid()
    return [f for f in files if with_diagram(f.read_text(), diagram, fence) != f.read_text()]


def main(
    argv: list[str], files: tuple[Path, ...] = SHOWN_IN, rooms_files: tuple[Path, ...] = ROOMS_SHOWN_IN
) -> int:
    """Rewrite the stale diagrams (or with --check, only name them); the exit code."""
    old = 0
    for fence, shown_in, draw in ((FENCE, files, mermaid), (ROOMS_FENCE, rooms_files, rooms_mermaid)):
        for f in stale(shown_in, fence):
            old += 1
            shown = f.relative_to(ROOT) if f.is_relative_to(ROOT) else f
            print(f"{shown}: diagram {'stale' if '--check' in argv else 'regenerated'}")
            if "--check" not in argv:
                f.write_text(with_diagram(f.read_text(), draw(), fence))
    return 1 if old and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
