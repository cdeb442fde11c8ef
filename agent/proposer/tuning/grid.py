"""The search's grid, as pure functions: every configuration of the knobs, for when optuna's TPE
keeps asking for configurations already tried (agent/proposer/tuning/search.py).

On one H100 the serving search stopped "exhausted" after 6 of its 48 configurations with 2.5 of
its 7 minutes left: TPE, modelling a short history, asked 20 times for ones it had tried. A grid
knob's values are its choices, both values of a `bool`, and an `int` range at its step; a `float`
has no grid. Where every knob has one and the product is at most `MOST`, the untried
configurations are listed and one is drawn (seeded, so a replay draws the same); otherwise
`DRAWS` random configurations are drawn and the first untried one is taken.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence

from state.proposers.search import Knob, KnobValue

MOST = 100_000
"""Most configurations listed; a larger (or continuous) space is sampled instead."""
DRAWS = 200
"""Random configurations drawn from a space too large to list before the search stops."""


def values(knob: Knob) -> list[KnobValue] | None:
    """The knob's values on the grid, in order; None for a `float` range (pure)."""
    if knob.type == "bool":
        return [False, True]
    if knob.type == "choice":
        return list(knob.choices)
    if knob.type == "int":
        assert knob.low is not None and knob.high is not None  # the model's validator
        step = 1 if knob.log else knob.step or 1
        if (int(knob.high) - int(knob.low)) // step + 1 > MOST:
            return None
        return list(range(int(knob.low), int(knob.high) + 1, step))
    return None


def size(knobs: Sequence[Knob]) -> int | None:
    """How many configurations the grid holds; None when a knob has no grid or they pass `MOST`."""
    each = [values(k) for k in knobs]
    if any(v is None for v in each):
        return None
    n = math.prod(len(v) for v in each if v is not None)
    return n if n <= MOST else None


def draw(knob: Knob, rng: random.Random) -> KnobValue:
    """One random value of the knob (uniform; log-uniform for a `log` range) (pure given `rng`)."""
    grid = values(knob)
    if grid is not None:
        return rng.choice(grid)
    assert knob.low is not None and knob.high is not None
    if knob.log:
        x = math.exp(rng.uniform(math.log(knob.low), math.log(knob.high)))
    else:
        x = rng.uniform(knob.low, knob.high)
    return min(max(round(x), int(knob.low)), int(knob.high)) if knob.type == "int" else x


def untried(
    knobs: Sequence[Knob], tried: Callable[[dict[str, KnobValue]], bool], seed: int
) -> dict[str, KnobValue] | None:
    """An untried configuration (every knob set), drawn with `seed`; None when every one of the
    grid was tried, or (no grid to list) `DRAWS` draws were all tried (pure)."""
    rng = random.Random(seed)
    if size(knobs) is not None:
        grids = [values(k) or [] for k in knobs]
        configs = (
            dict(zip([k.name for k in knobs], combo, strict=True)) for combo in itertools.product(*grids)
        )
        left = [c for c in configs if not tried(c)]
        return rng.choice(left) if left else None
    for _ in range(DRAWS):
        config = {k.name: draw(k, rng) for k in knobs}
        if not tried(config):
            return config
    return None
