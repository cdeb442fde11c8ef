"""What a profiler run measured (`profile`) and what the diagnose step concluded from it
(`diagnosis`).

Imports `state.base` and `state.engines` (vLLM's decode phases). Imported by `state.sessions`,
tools/ (trace reading, profiling), agent/ and playbooks/."""
