"""The graph's nodes, one module per phase of the loop, and the actions they share.

`setup` (prepare, instrument, launch, baseline, reconcile), `profile` (profile, diagnose), `propose`,
`patch` (approve, apply, cleanup, relaunch, rollback), `measure` (measure, decide), `trial` and
`fanout` (candidates tried at once on several hosts, then joined), `end` (finish, abort);
`actions` holds the tool sequences several steps run (the session branch, the instrumentation, the
session's playbooks); starting and measuring a server is `agent/serving.py`. A node returns
`Command[Literal[...]]` naming where it may go, its update a `LoopUpdate` (state/sessions/updates.py); it
reaches the decision rule through `agent.decision.rules.rule_for`.

May import: `agent.context`, `agent.serving`, `agent.decision`, `agent.proposer`, `tools` (side
effects only through the door), `playbooks`, `state`. Never `agent.sessions`, `agent.cli`,
`agent.web`, `agent.report`.
"""
