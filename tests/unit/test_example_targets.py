"""Every example target file loads as perfloop reads it (the same validation `perfloop run` does
first), and the launch options its search varies are ones a search may change for its kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli.target import load_target
from playbooks.flags import changeable

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples" / "targets").glob("*.toml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_target_loads_and_its_search_knobs_are_changeable(path: Path) -> None:
    target = load_target(path)
    assert target.name and target.kind in path.read_text()
    for knob in target.search.knobs if target.search else []:
        if not knob.env:
            assert knob.name in changeable(target.kind), (path.name, knob.name)


def test_the_examples_cover_every_target_kind() -> None:
    assert {load_target(p).kind for p in EXAMPLES} == {"mla_server", "sglang", "vllm"}
