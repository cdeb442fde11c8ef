"""Every side effect of perfloop, as typed tool functions behind one door.

`door/` (the door, tool registry, replay, crash points), `store/` (the session store), `hosts/`
(local and SSH hosts), `workspace/` (git, instrumentation), `trace/` (profiler traces), `sglang/`
(SGLang layout, patches, server, bench_serving), `tolerance/` (the tolerance policy's scores), `llm/` (the model and
its read-only code tools), `client/` (the benchmark client's requests, statistics and workload windows);
`server`, `bench`, `profiling` the demo-agnostic server, benchmark and profile tools; `toolbox` lists every tool once.

May import: `state` and `tools` itself; never `agent` or `playbooks`.
"""
