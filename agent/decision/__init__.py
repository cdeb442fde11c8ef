"""The decision rule: is a candidate faster than the reference, by how much, and how sure are we?

Pure functions only (`rule.py`: per-request log TPOT, Hodges-Lehmann shift per prompt, a bootstrap
stratified by prompt plus launch-to-launch noise, verdicts over sequential looks; `noise.py`:
launch noise pooled from A/A launches). The steps that measure and store live in agent/steps_*.
"""
