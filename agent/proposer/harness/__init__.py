"""`perfloop eval proposer`: tasks with known answers, each a real session scored from its
finished state (`evaluation`), and the `sglang-port` task, the model's part of a session on a real
SGLang release scored by the equivalence harness (`porting`).

May import: `chat`, `agent.context`, `playbooks`, `state`, `tools`. Imported by the `eval`
command (agent/cli/commands/evaluate.py) and benchmarks/eval_scripted.py.
"""
