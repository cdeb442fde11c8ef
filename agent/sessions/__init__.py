"""Sessions around the graph: start, resume, fork (`runner`), what `show`, `report` and `replay` read
without the checkpointer (`stored`, with an imported recording's replayed states kept by
`replayed`), a replay in memory (`replaying`), the checkpointer (`checkpoint`) and its serializer
(`serde`), export/import (`archive`), the summary (`summary`) with its steps' bandwidth floors
(`floor`), approval answers (`approving`), and
the SSH hosts' executors (`remote`).

May import: `agent.graph`, `agent.context`, `agent.steps` (the fork steps), `tools`, `state`.
Never `agent.cli`, `agent.web`, `agent.report`.
"""
