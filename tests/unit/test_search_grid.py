"""The search goes on while untried configurations remain (issue 57): when optuna's TPE keeps asking
for tried configurations, an untried one of the grid is proposed, and "exhausted" is said only when
every configuration was tried (agent/proposer/tuning/grid.py); sessions recorded before stop as
they ran."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.proposer.tuning import grid, search
from agent.proposer.tuning.knobs import config_of, with_config
from state.proposers.search import Knob, SearchConfig
from state.sessions.loop import Decision, LoopState
from tests.unit.test_search import ARGV, decided, state

KNOBS = [
    Knob(name="--max-total-tokens", type="choice", choices=[4096, 8192, 24576]),
    Knob(name="--max-running-requests", type="int", low=2, high=8, step=2),
    Knob(name="--disable-cuda-graph", type="bool"),
]
"""3 x 4 x 2 = 24 configurations."""


class Stuck:
    """A study whose sampler only ever returns the first trial's configuration."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.params = config

    def ask(self, _dists: object) -> Stuck:
        return self


def grid_state(tmp_path: Path, decisions: list[Decision], on: bool) -> LoopState:
    s = state(tmp_path, decisions)
    opts = s.options.model_copy(update={"search_grid": on})
    cfg = SearchConfig(knobs=KNOBS, seed=3, max_trials=100)
    return s.model_copy(update={"options": opts, "target": s.target.model_copy(update={"search": cfg})})


def test_a_stuck_sampler_still_proposes_every_untried_configuration_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first: dict[str, bool | int | float | str] = {
        "--max-total-tokens": 4096,
        "--max-running-requests": 2,
        "--disable-cuda-graph": False,
    }
    monkeypatch.setattr(search, "_study", lambda *a, **k: Stuck(first))
    history = [decided(1, with_config(ARGV, KNOBS, first), 5.0)]
    old = search.search_proposal(grid_state(tmp_path, history, on=False))
    assert old == (None, "search space exhausted after 1 trials")  # a recorded session, as it ran
    proposed = []
    while True:
        p, what = search.search_proposal(grid_state(tmp_path, history, on=True))
        if p is None:
            break
        assert "untried configuration of the grid" in p.explanation and p.launch_argv is not None
        config = config_of(p.launch_argv, KNOBS)
        proposed.append(tuple(sorted(config.items())))
        history.append(decided(len(history) + 1, p.launch_argv, 5.0))
    assert what == "search space exhausted after 24 trials: every one of the 24 configurations tried"
    assert len(proposed) == 23 == len(set(proposed)) and tuple(sorted(first.items())) not in proposed
    assert grid.size(KNOBS) == 24


def test_the_same_history_draws_the_same_untried_configuration(tmp_path: Path) -> None:
    """Seeded by the search's seed and its trial count: a replay or resume draws the same one."""
    tried = lambda c: c["--max-total-tokens"] == 4096
    a, b = grid.untried(KNOBS, tried, 7), grid.untried(KNOBS, tried, 7)
    assert a == b and a is not None and a["--max-total-tokens"] != 4096
    assert grid.untried(KNOBS, lambda c: True, 7) is None


def test_a_space_too_large_to_list_is_drawn_from_and_never_called_exhausted() -> None:
    """A float knob (or a grid past `MOST`) has no list: random draws, each knob in its range."""
    knobs = [*KNOBS, Knob(name="MLA_CHUNK", env=True, type="float", low=0.5, high=2.0)]
    assert grid.size(knobs) is None and grid.values(knobs[-1]) is None
    config = grid.untried(knobs, lambda c: False, 1)
    assert (
        config is not None
        and 0.5 <= float(config["MLA_CHUNK"]) <= 2.0
        and set(config) == {k.name for k in knobs}
    )
    huge = Knob(name="--pool", type="int", low=1, high=10_000_000)
    assert grid.size([huge]) is None and grid.untried([huge], lambda c: int(c["--pool"]) < 5, 2) is not None
