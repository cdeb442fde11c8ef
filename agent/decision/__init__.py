"""Judging a candidate: is it faster than the reference, by how much, how sure, and are its outputs
still right?

Pure statistics: `rule` (per-request log TPOT, Hodges-Lehmann shift per prompt, a bootstrap stratified
by prompt plus launch-to-launch noise, verdicts over sequential looks), `noise` (launch noise pooled
from A/A launches), `mechanism` (did the predicted op shrink?), `judge` (the verdict). Measuring the
arms: `measuring` (one arm's launches and requests, drift, A/A records), `interleave` (both arms live
at once, requests alternated), `calibrate` (A/A launches on demand). Outputs: `correctness` (the
prompt set), `outputs` (identical or within tolerance).

May import: `agent.context`, `agent.steps.actions` (to measure a server), `tools`, `state`.
"""
