"""What the model is shown: the first message's evidence (`evidence`: the target, the profile,
the findings, a stored patch to port, earlier attempts), the system prompt, the tools and how
target data is wrapped as `<data>` (`prompt`), and what each tried model candidate showed, kept
for the next rounds (`feedback`).

May import: `edits` (path checks), `agent.context`, `playbooks`, `state`, `tools.llm`.
Imported by `chat` and `agent.steps` (patch, trial: a candidate's trial recorded for the model).
"""
