"""Sessions read back without running them: what `show`, `report` and `replay` read without the
checkpointer (`stored`), a session run here read from its checkpoints without the graph
(`direct`), an imported recording's replayed states kept (`replayed`), a replay in memory
(`replaying`), and the checkpoints' serializer (`serde`).

May import: `agent.graph`, `agent.context`, `agent.sessions` (its binding, summary and checkpointer), `tools`,
`state`. Never `agent.sessions.runner` (it builds on these), `agent.cli`, `agent.web`, `agent.report`.
"""
