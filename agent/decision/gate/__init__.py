"""The output gate: are the candidate's outputs still right? `correctness` builds the correctness
set (fixed prompts plus seeded random ones and long contexts) and compares greedy outputs;
`outputs` applies the target's `[correctness] policy` (`numerics`: `numerics` judges texts that
moved by how far they move the baseline's tokens against the engine's own, the test itself pure in
`moves`; `exact`; or `tolerance` by teacher-forced scores).

May import: `agent.context`, `tools`, `state`. Imported by `arms`, `rules` and the session summary.
"""
