"""The `search` proposer: the next launch config of `[search]`, picked by optuna's TPE from the
session's own decisions (`search`), and the knob values in a launch command both ways (`knobs`).
Pure: no model, no door.

May import: `playbooks`, `state`, `agent.decision.stats` (pure: a trial above its predicted
bound), `tools.engines` (the engine's batching flag); no other room of agent.proposer. Imported by `agent.steps`
(propose), the session summary and the CLI's rendering (`trial_lines`), and
benchmarks/search_vs_grid.py.
"""
