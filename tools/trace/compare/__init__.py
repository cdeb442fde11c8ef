"""What a finished summary is set against: another profile (`diff`, per operator group and step)
and the host's memory copy bandwidth (`bandwidth`, for the roofline lines of CPU-only traces).

May import: `state.profiling.profile` and the standard library only; no other room of tools.trace.
Imported by the `diagnose` and `diff` commands (agent/cli/commands/analysis.py).
"""
