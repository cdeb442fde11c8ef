"""Pydantic models, by concern: `config` (the target file, a session's options), `sessions` (the graph
state `LoopState` and a node's `LoopUpdate`), `measurement` (timings, decisions, output gates),
`profiling` (profiles, diagnoses), `proposers` (the LLM proposer, the launch-option search),
`engines` (hosts, processes, checkouts, SGLang and vLLM specifics) and `door` (tool calls and their
records); `base` is the `Model` every one derives from.

Imports nothing of perfloop's: every other package may import it. Its sub-packages import each
other in one direction only (each one's docstring says which).
"""
