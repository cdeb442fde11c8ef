"""The command groups, one module each (loop, calibrate, sessions, report, analysis, sglang, host,
evaluate): plain functions and a `COMMANDS` table of name -> function, built into the app by
`agent.cli`; `show` (sessions' table lists it), `flags` (the options `demo` and `run` share),
`ranks` (analysis') and `eval_tasks` (what `eval proposer` runs) are parts of a group. They import
the shared parts one level up (`agent.cli.options`, `running`, `output`, ...) at their top and the
loop's (`agent.cli.common`, the session store) inside the commands, never `agent.cli` itself.
"""
