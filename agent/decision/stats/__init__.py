"""The statistics of deciding, as pure functions of measurements: no door, no runtime, no I/O.

`rule` (per-request log TPOT, Hodges-Lehmann shift per prompt, a bootstrap stratified by prompt
plus launch noise, verdicts over sequential looks), `levels` (the workload's objective levels),
`noise` (launch noise pooled from A/A launches and pairs), `power` (the gain a session can resolve
and the requests and looks it needs), `replicates` (alternating arms: launches as replicates, a
random-effects interval, launches per arm), `crossover` (cross-host arms: the two-host crossover),
`mechanism` (did the predicted op shrink?).

May import: `state` only. Imported by every other room of `agent.decision`, the summary and the report; tested in
tests/unit (test_decision_rule, test_noise, test_power, test_replicates, test_crossover, ...).
"""
