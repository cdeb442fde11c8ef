"""The proposers that are not playbooks: the LLM's conversation that ends in a validated patch or
launch change, and the `search` over launch options. Five rooms, imports running down:
- `edits` (pure): a model's answer to a candidate: SEARCH/REPLACE blocks (`blocks`, `matching`),
  the validation chain (`checks`) and `LAUNCH:` lines (`launching`);
- `briefing`: what the model is shown: the first message's evidence (`evidence`), the protocol
  and how data is shown (`prompt`), what earlier candidates' trials showed (`feedback`);
- `chat`: the conversation itself within the `propose` node, each model and tool call a recorded
  door call (`conversation`, `asking`, `protocol`, `toolset`, `probing`);
- `tuning` (pure): the launch-option search (`search`, `knobs`), apart from the model;
- `harness`: `perfloop eval proposer`'s tasks and scores (`evaluation`, `porting`).
Imported by `agent.steps` (propose, patch, trial), the session summary, the CLI and benchmarks.
The rooms' import rules are under test (tests/unit/test_corridor_rooms.py).
"""
