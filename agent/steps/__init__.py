"""The graph's nodes, one module per phase of the loop, and the actions they share.

`setup` (prepare, instrument, launch, baseline, reconcile), `profile` (profile, diagnose), `propose`,
`patch` (approve, apply, cleanup, relaunch, rollback), `measure` (measure, decide), `trial` and
`fanout` (candidates tried at once on several hosts, then joined), `end` (finish, abort);
`actions` holds the tool sequences several steps run (launch and measure a server, remove the
instrumentation, ...). A node returns `Command[Literal[...]]` naming where it may go.

May import: `agent.context`, `agent.decision`, `agent.proposer`, `tools` (side effects only through
the door), `playbooks`, `state`. Never `agent.sessions`, `agent.cli`, `agent.web`, `agent.report`.
"""
