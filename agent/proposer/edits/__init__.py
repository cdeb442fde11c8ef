"""A model's answer turned into a candidate, or the reason it cannot be, written for the model.

`blocks` parses and applies SEARCH/REPLACE edit blocks in memory and builds the diff, `matching`
finds each SEARCH part (exactly, then tolerating what models get wrong), `checks` is the
validation chain a patch must pass, and `launching` turns `LAUNCH:` lines into a launch command.
Pure: the file reads and the `git apply --check` that `checks.validate` needs are passed in
by the caller (`chat`).

May import: `state`, `playbooks`, `tools.errors`, `tools.workspace.patch_check`,
`tools.llm.redact`; no other room of agent.proposer. Imported by `briefing`, `chat` and
tests/integration/test_hostile_patch.py.
"""
