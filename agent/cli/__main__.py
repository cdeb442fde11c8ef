"""`python -m agent.cli`: the `perfloop` command (the approval page runs its answers this way)."""

from agent.cli import app

app(prog_name="perfloop")
