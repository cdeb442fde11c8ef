"""The loop's diagram, drawn by LangGraph from the compiled graph, where the docs show it.

`python -m agent.diagram` rewrites the ```` ```mermaid ```` block of each file in SHOWN_IN with
`graph.get_graph().draw_mermaid()`; `--check` changes nothing and exits 1 naming the stale files.
tests/unit/test_graph.py fails when a copy no longer matches the graph.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agent.graph import graph

ROOT = Path(__file__).resolve().parents[1]
SHOWN_IN = (ROOT / "docs" / "ARCHITECTURE.md", ROOT / "agent" / "graph.py")
"""Files holding the diagram, each in one ```` ```mermaid ```` block."""
FENCE = "```mermaid\n"


def mermaid() -> str:
    """The compiled graph as mermaid (edges only: dotted = routed by a node's Command)."""
    drawn = graph.get_graph().draw_mermaid(with_styles=False)
    return "".join(line.replace("\t", "    ").rstrip() + "\n" for line in drawn.splitlines())


def with_diagram(text: str, diagram: str) -> str:
    """`text` with its mermaid block's body replaced by `diagram` (pure); ValueError without one."""
    if text.count(FENCE) != 1:
        raise ValueError(f"expected exactly one {FENCE.strip()} block, found {text.count(FENCE)}")
    start = text.index(FENCE) + len(FENCE)
    end = text.find("```", start)
    if end < 0:
        raise ValueError(f"the {FENCE.strip()} block is not closed with ```")
    return text[:start] + diagram + text[end:]


def stale(files: tuple[Path, ...] = SHOWN_IN) -> list[Path]:
    """The files whose diagram differs from the graph's."""
    diagram = mermaid()
    return [f for f in files if with_diagram(f.read_text(), diagram) != f.read_text()]


def main(argv: list[str], files: tuple[Path, ...] = SHOWN_IN) -> int:
    """Rewrite the stale diagrams (or with --check, only name them); the exit code."""
    old = stale(files)
    for f in old:
        shown = f.relative_to(ROOT) if f.is_relative_to(ROOT) else f
        print(f"{shown}: diagram {'stale' if '--check' in argv else 'regenerated'}")
        if "--check" not in argv:
            f.write_text(with_diagram(f.read_text(), mermaid()))
    return 1 if old and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
