"""The engine contract suite: the checks every engine passes, the same for each kind.

`check_static(kind, checkout)` needs no running engine: the engine is registered by entry point as
pyproject.toml says, its flags are ones the flag checks accept (spelled as it reads them, none
fixed), its readiness defaults are `[launch]` fields, the dormant profiler goes in and comes out
of its checkout byte for byte, and it names only context sources tools/limits.py reads.
`check_live(kind, base_url, model, trace)` talks to a running server: perfloop's streaming client
gets tokens, the server states its context limit where the engine says, and a trace it wrote
reads with the engine's own markers and phase scopes where it has them.
Driven by tests/engines/test_contract.py (every kind statically, the demo live) and
tests/vllm/test_launch.py (vLLM live, on the vLLM group's one tiny-Llama server).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from playbooks.flags import FIXED, changeable, flag_problem
from state.config.target import LaunchConfig
from state.engines.limits import ContextLimitArgs
from state.measurement.workload import WorkloadConfig
from tools.client.stream import chat_body, stream_completion
from tools.engines.contract import BenchClient, Engine
from tools.engines.registry import BUILTINS, engine
from tools.limits import FIELDS, context_limit
from tools.workspace.git import GitWorkspace
from tools.workspace.instrumentation import instrument, remove_instrumentation

ROOT = Path(__file__).resolve().parents[2]


def registered_in_pyproject() -> dict[str, str]:
    """The `perfloop.engines` entry points perfloop's pyproject.toml declares."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return dict(project["entry-points"]["perfloop.engines"])


def check_static(kind: str, checkout: Path, site: tuple[str, str, str] | None = None) -> Engine:
    """Every check that needs no running engine; `checkout` a git repo of the engine's source,
    `site` where the target file puts the profiler when the engine finds none itself."""
    eng = engine(kind)
    assert type(eng).__name__ and eng.name == kind
    if kind in BUILTINS:
        assert registered_in_pyproject()[kind] == BUILTINS[kind]
    # flags: every changeable one accepted as it is spelled, none fixed, the batch flag among them
    assert eng.changeable_flags and changeable(kind) == list(eng.changeable_flags)
    for flag in eng.changeable_flags:
        assert eng.normalise_flag(flag) == flag and flag_problem(kind, flag, "1") is None, flag
    assert not set(eng.changeable_flags) & {*FIXED, *eng.fixed_flags}
    assert eng.batch_flag is None or eng.batch_flag in eng.changeable_flags
    assert flag_problem(kind, "--port", "1") is not None  # where it listens: never
    LaunchConfig.model_validate({"argv": ["x"], **eng.launch_defaults})  # readiness: real fields
    # the dormant profiler: into the site and out again, every byte back
    found = eng.hook_site(checkout, {})
    where = (found.relpath, found.class_name, found.method) if found else site
    assert where is not None, f"{kind}: no profiler site found or given"
    with GitWorkspace(checkout) as ws:
        before = ws.read_file(where[0])
        record = instrument(ws, *where)
        ast.parse(ws.read_file(where[0]))
        assert ws.read_file(where[0]) != before
        remove_instrumentation(ws, record)
        assert ws.read_file(where[0]) == before
    # context limit: only sources tools/limits.py asks every server for
    known = {f"{path} {field}" for path, fields in FIELDS.items() for field in fields}
    assert set(eng.context_fields) <= known | {"/v1/models max_model_len"}, eng.context_fields
    bench = eng.bench()
    assert bench is None or (isinstance(bench, BenchClient) and "1.2.3" in bench.client_name("m", "1.2.3"))
    window = WorkloadConfig(concurrency=2, requests=4, prompts=4, input_len=[16, 16], output_len=[8, 8])
    assert bench is None or bench.window_requests(window) == 4
    assert eng.bench_by_default is False or bench is not None
    return eng


def check_live(kind: str, base_url: str, model: str, trace: Path | None = None) -> None:
    """Every check against a running server of `kind` at `base_url` serving `model`; `trace` one
    the server's profiler wrote, read with the engine's markers."""
    eng = engine(kind)
    arrivals, text, _ = stream_completion(base_url, chat_body(model, "Hello there", 4), 120)
    assert len(arrivals) >= 1 and text, (kind, text)
    limit = context_limit(ContextLimitArgs(base_url=base_url, model=model))
    assert limit.tokens and limit.source in eng.context_fields, limit
    if trace is not None:
        phases = eng.decode_phases(trace)
        assert phases is not None and phases.steps >= 1 and "forward" in phases.phase_ms, phases
