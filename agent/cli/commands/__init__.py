"""The command groups, one module each (loop, calibrate, sessions, report, analysis, sglang, host,
evaluate): plain functions and a `COMMANDS` table of name -> function, built into the app by
`agent.cli`. They import the shared parts one level up (`agent.cli.common`, `output`, `render`,
`running`, `target`, ...), never `agent.cli` itself (evaluate reuses loop's session options).
"""
