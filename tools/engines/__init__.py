"""Engines: the one contract a served engine implements (contract.py), the registry that finds
engines by Python entry point (registry.py, group `perfloop.engines`), the benchmark plumbing the
engines' own clients share (benchrun.py) and the demo server's implementation (demo.py).

SGLang's and vLLM's implementations live in their packages (tools/sglang/engine.py,
tools/vllm/engine.py). May import: state, tools.errors, tools.progress, tools.secrets. Imported by:
tools.bench, playbooks.flags, agent (serving, cli). docs/engines.md is the map.
"""
