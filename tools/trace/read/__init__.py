"""Reading trace files: bytes in, compact columns out, in bounded memory (no analysis here).

`stream` decodes a Chrome trace's events chunk by chunk (msgspec), `split` cuts one plain-JSON
file into byte ranges at event boundaries so several processes can decode it, `collect` turns the
events into per-thread and per-trace numpy columns in one pass, `heap` keeps freed buffers in the
heap while a trace is read, and `table` reads key_averages text tables (straight to a summary).

May import: `tools.errors`, `state.profiling.profile`, the standard library, numpy and msgspec; no other
room of tools.trace. Imported by `analyses`, `ranks` and tools.trace itself.
"""
