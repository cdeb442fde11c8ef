"""Judging a candidate: is it faster than the reference, by how much, how sure, and are its outputs
still right?

The seam the steps call: `rules.rule_for(name)` gives the session's `Rule` (`judging`: baseline,
judge, verdict; results as `JudgedCandidate` / `RuleVerdict`): `ci` (`ci-v1`, every new session) or
`legacy` (`iqr-v0`, the only module that names it, for sessions recorded before `ci-v1`).

Pure statistics: `rule` (per-request log TPOT, Hodges-Lehmann shift per prompt, a bootstrap stratified
by prompt plus launch-to-launch noise, verdicts over sequential looks), `noise` (launch noise pooled
from A/A launches), `mechanism` (did the predicted op shrink?). Measuring the arms: `measuring` (a
candidate look by look on its own launch, drift, A/A records), `interleave` (both arms live at once,
requests alternated), `alternating` (the trees launched in turn; statistics in `replicates`),
`crosshost` (the reference on another host at the same time, a crossover; statistics in
`crossover`), `calibrate` (A/A launches on demand). Outputs: `correctness` (the prompt set),
`outputs` (the output gate: identical, or within tolerance).

May import: `agent.context`, `agent.serving` (to start and measure a server), `agent.hostrun` (a
run on another host), `tools`, `state`;
never `agent.steps` (which sits above it).
"""
