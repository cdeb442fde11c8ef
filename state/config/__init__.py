"""What the user asks for: the target file (`target`: the engine checkout, where it runs, how to
launch and measure it) and the choices a session was started with (`options`).

Imports `state.base`, `state.engines`, `state.measurement` and `state.proposers` (the target
file's sections). Imported by `state.sessions`, `state.door`, tools/, agent/ and benchmarks/."""
