"""The proposers' settings and records: the LLM proposer and its model call (`proposer`), the
read-only repo tools it offers the model (`llm_tools`), and the launch-option search (`search`).

Imports only `state.base`. Imported by `state.config` (the target file's `[proposer]`, `[search]`),
`state.sessions`, tools/llm and agent/."""
