"""The conversation with the model inside `propose`: model -> read-only tools -> model ->
validated answer, every model and tool call a recorded door call.

`conversation` runs one, `asking` runs a round of them (one candidate per host), `protocol` adapts
to the server's dialect (tool calls or text, reasoning, token budget), `toolset` answers the
model's read-only tool calls and `probing` its `run_probe` calls.

May import: `briefing`, `edits`, `agent.context`, `playbooks`, `state`, `tools`.
Imported by `harness`, `agent.steps` (propose, patch) and tests/llm.
"""
