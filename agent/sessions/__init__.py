"""Sessions around the graph: start, resume, fork (`runner`), sessions read back without running
them (`reading/`: the store without the checkpointer, kept replayed states, a replay in memory, the
serializer), the checkpointer (`checkpoint`), export/import (`archive`), the summary (`summary`) with
its steps' bandwidth floors (`floor`), approval answers (`approving`), and the SSH hosts' executors
(`remote`).

May import: `agent.graph`, `agent.context`, `agent.steps` (the fork steps), `tools`, `state`.
Never `agent.cli`, `agent.web`, `agent.report`.
"""
