"""Many traces into one summary: reading on every core and merging what the ranks saw.

`parallel` reads one process per rank file, or one large plain file in byte ranges whose columns
are merged before the analysis (`handoff`: a range worker's columns come back through a memfd); `merge` merges the summaries of several rank files into one;
`collectives` is what only several ranks show (time in collectives, waits, the straggler).

May import: `read`, `analyses`, `state.profiling.profile`, `tools.errors`. Imported by tools.trace itself
(`read_profiles`) and the `analyze` command's per-rank view
(agent/cli/commands/analysis.py, ranks.py).
"""
