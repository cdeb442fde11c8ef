"""Measuring and deciding: per-request timings and their statistics (`measure`), the workload
(`workload`), how arms are placed (`arms`), A/A evidence (`aa`), a session's power (`power`), the
decision rule's values (`decision`), the output gates (`correctness`, `tolerance`, `numerics`),
parallel trials' outcomes (`trials`), and a decode step's memory-bandwidth floor (`floor`).

Imports only `state.base`. Imported by `state.config`, `state.sessions`, `state.door`, and by
tools/, agent/ and benchmarks/."""
