"""The compiled graph: the diagram the docs show is the one LangGraph draws from it, and it runs
only with a door (what LangGraph Studio, which supplies none, gets instead)."""

from pathlib import Path

import pytest

from agent.cli.target import load_target
from agent.context import NO_DOOR
from agent.diagram import SHOWN_IN, main, mermaid, stale, with_diagram
from agent.graph import NODES, graph
from state.config.options import LoopOptions
from state.sessions.loop import LoopState

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_show_the_compiled_graph():
    assert stale() == [], "the graph changed: run `python -m agent.diagram` and commit the result"


def test_the_diagram_has_every_node_and_the_routes_of_their_annotations():
    diagram = mermaid()
    for node in [*NODES, "finish", "abort"]:
        name = getattr(node, "__name__", node)
        assert f" {name};" in diagram or f"-> {name};" in diagram, name
    assert "    relaunch -.-> rollback;\n" in diagram and "    finish --> __end__;\n" in diagram
    assert "\t" not in diagram and all(line == line.rstrip() for line in diagram.splitlines())


def test_only_the_mermaid_block_is_replaced():
    text = "intro\n```mermaid\nold\n```\n\n```python\nkept\n```\n"
    assert with_diagram(text, "new\n") == "intro\n```mermaid\nnew\n```\n\n```python\nkept\n```\n"
    for bad in ("no block\n", "```mermaid\na\n```\n```mermaid\nb\n```\n", "```mermaid\nnever closed\n"):
        with pytest.raises(ValueError):
            with_diagram(bad, "new\n")


def test_check_names_a_stale_copy_and_regenerating_fixes_it(tmp_path, capsys):
    copy = tmp_path / "ARCHITECTURE.md"
    copy.write_text(with_diagram(SHOWN_IN[0].read_text(), "graph TD;\n    a --> b;\n"))
    assert main(["--check"], (copy,)) == 1 and f"{copy}: diagram stale" in capsys.readouterr().out
    assert main([], (copy,)) == 0 and main(["--check"], (copy,)) == 0
    assert with_diagram(copy.read_text(), mermaid()) == copy.read_text()


def test_without_a_door_the_first_step_says_the_cli_runs_the_loop(tmp_path):
    target = load_target(ROOT / "examples" / "targets" / "mla_server.toml", repo=str(tmp_path))
    state = LoopState(
        session_id="s", target=target, options=LoopOptions(session_dir=tmp_path, python="python3")
    )
    with pytest.raises(RuntimeError) as err:
        graph.invoke(state)  # as `langgraph dev` would: no context
    assert str(err.value) == NO_DOOR and "perfloop run|demo|resume" in NO_DOOR
    assert list(tmp_path.iterdir()) == []  # nothing ran
