"""Judging a candidate: is it faster than the reference, by how much, how sure, and are its outputs
still right? Four rooms, one job each, importing only downward in this order:

- `rules/`: the rule a session was started with (`rules.rule_for(name)`: `ci-v1` for every new
  session, the legacy `iqr-v0` for older recordings): baseline, judge, verdict. The steps call it
  and nothing else here.
- `calibration/`: learning the launch noise and the power on purpose (A/A pairs at the baseline,
  `perfloop calibrate`).
- `arms/`: how the arms run and are measured (which arms, a candidate look by look, interleaved,
  alternating, cross-host with the reference host, the A/A launches a session makes anyway).
- `gate/`: the output gate (the correctness set, exact or tolerance compare).
- `stats/`: the statistics, pure functions of measurements (no door, no runtime).

`judging.py`, beside the rooms, is the seam's types (`Rule`, `JudgedCandidate`, `RuleVerdict`),
below every room. The import direction (rules -> calibration -> arms -> gate, stats; each may
import `judging`) is held by tests/unit/test_decision_rooms.py; `python -m agent.diagram` draws it
from the imports (an arrow: imports):

```mermaid decision-rooms
flowchart TD
    arms --> gate;
    arms --> judging;
    arms --> stats;
    calibration --> arms;
    calibration --> stats;
    gate --> stats;
    rules --> arms;
    rules --> calibration;
    rules --> gate;
    rules --> judging;
    rules --> stats;
```

May import: `agent.context`, `agent.serving` (to start and measure a server), `agent.hostrun` (a
run on another host), `tools`, `state`; never `agent.steps` (which sits above it).
"""
