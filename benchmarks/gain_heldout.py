"""The gain model held out (issue 42): build the corpus of H200 traces with what each fix realized,
print the leave-one-launch-out table, and cut traces small enough to commit.

    # the corpus: the device calls' outputs of gain_traces_h200.sh (each a folder with
    # realized.json and the traces untarred) and the recorded H200 sessions
    PYTHONPATH=. python benchmarks/gain_heldout.py build -o tests/data/traces/gain/corpus.json \
        --call h200-2026-12-02-call1=/tmp/gm1 ... --session benchmarks/h200-2026-11-30/b-eager-session.json.gz ...
    # the table (benchmarks/README.md, "The gain model held out")
    PYTHONPATH=. python benchmarks/gain_heldout.py table tests/data/traces/gain/corpus.json
    # a trace cut to its first N step windows, keeping only the fields the reader reads
    PYTHONPATH=. python benchmarks/gain_heldout.py cut SRC DST --windows 2
"""

import argparse
import gzip
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playbooks.engine import diagnose, load_playbooks  # noqa: E402
from playbooks.heldout import CorpusTrace, leave_one_out, table  # noqa: E402
from state.profiling.diagnosis import DiagnosisContext  # noqa: E402
from state.profiling.profile import ProfileSummary  # noqa: E402
from tools.trace import read_profiles  # noqa: E402
from tools.trace.analyses.windows import marker_kind  # noqa: E402

FIXES = ("launch-bound-decode", "kv-cache-full-pool-cast")
KEEP_ARGS = ("correlation", "Input Dims", "Input type", "device")
"""The args tools.trace.read.stream reads; every other field of an event is dropped by `cut`."""


def effects(profile: ProfileSummary) -> dict:
    """Each fix the playbooks find in the profile: its effect (the TPOT plays no part in it)."""
    ctx = DiagnosisContext(target_kind="mla_server", active_tokens=79, host_inflation=1.0)
    found = diagnose(profile, ctx, load_playbooks()).findings
    return {f.playbook: f.effect.model_dump() for f in found if f.playbook in FIXES and f.effect}


def call_rows(origin: str, folder: Path, committed: dict[str, Path]) -> list[dict]:
    """The rows of one device call: every trace (the committed cut of it where there is one), with
    the TPOTs its launches served."""
    doc = json.loads((folder / "realized.json").read_text())
    tpot = {(r["variant"], r["mode"]): statistics.median(r["tpot_before_ms"]) for r in doc["rows"]}
    rows = []
    for (variant, mode), served in sorted(tpot.items()):
        realized = {}
        if mode == "eager" and (variant, "graphs") in tpot:
            realized["launch-bound-decode"] = served / tpot[(variant, "graphs")]
        if variant == "cast" and ("fixed", mode) in tpot:
            realized["kv-cache-full-pool-cast"] = served / tpot[("fixed", mode)]
        for method, file in (("api", "api"), ("patch", "hook")):
            path = committed.get(
                f"{origin}/{variant}-{mode}-{method}", folder / f"{variant}-{mode}-{file}.json.gz"
            )
            if not path.exists():
                continue
            profile = read_profiles([path])
            found = effects(profile)
            rows.append(
                {
                    "id": f"{origin}/{variant}-{mode}-{method}",
                    "launch": f"{origin}/{variant}-{mode}",
                    "origin": origin,
                    "variant": variant,
                    "mode": mode,
                    "method": method,
                    "tpot_ms": served,
                    "bounds": profile.step_bounds.model_dump(),
                    "effects": found,
                    "realized": {k: v for k, v in realized.items() if k in found},
                }
            )
    return rows


def session_rows(path: Path) -> list[dict]:
    """The rows of one recorded session: each profile it read, with the TPOT of its iteration and
    what the fix decided on it realized (replayed offline)."""
    import os
    import tempfile

    from agent.sessions.archive import import_session
    from agent.sessions.runner import Sessions

    os.environ["PERFLOOP_HOME"] = tempfile.mkdtemp(prefix="gain-heldout-")
    sessions = Sessions()
    sid = import_session(sessions.store, path)
    state, _ = sessions.replay(sid)
    doc = json.loads(gzip.decompress(path.read_bytes()))
    reads = [c for c in doc["tool_calls"] if c["name"] == "profile.read"]
    takes = [c for c in doc["tool_calls"] if c["name"] == "profile.take"]
    origin = f"{path.parent.name}/{path.name.removesuffix('-session.json.gz')}"
    rows = []
    for iteration, (take, read) in enumerate(zip(takes, reads, strict=True), 1):
        decision = next((d for d in state.decisions if d.iteration == iteration), None)
        if decision is None or decision.tpot_ms_before is None:
            continue
        profile = ProfileSummary.model_validate(read["output"])
        if profile.step_bounds is None:
            continue
        found = effects(profile)
        realized = {}
        if decision.source in FIXES and decision.verdict == "accepted" and decision.tpot_ms_after:
            realized[decision.source] = decision.tpot_ms_before / decision.tpot_ms_after
        mode = "eager" if profile.step_bounds.bound == "host launch" else "graphs"
        rows.append(
            {
                "id": f"{origin}/it{iteration}",
                "launch": f"{origin}/it{iteration}",
                "origin": origin,
                "variant": "cast" if "kv-cache-full-pool-cast" in found else "fixed",
                "mode": mode,
                "method": take["input"]["method"],
                "tpot_ms": decision.tpot_ms_before,
                "bounds": profile.step_bounds.model_dump(),
                "effects": found,
                "realized": {k: v for k, v in realized.items() if k in found},
            }
        )
    return rows


def cut(src: Path, dst: Path, windows: int) -> None:
    """The trace's events from its first step marker to the end of its N-th window (no ac2g flows),
    each with only the fields the reader reads."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    events = doc["traceEvents"]
    marks = sorted(
        (
            e
            for e in events
            if e.get("ph") == "X" and e.get("cat") == "user_annotation" and marker_kind(e["name"]) >= 0
        ),
        key=lambda e: e["ts"],
    )
    best = min(marker_kind(e["name"]) for e in marks)
    starts = sorted({e["ts"] for e in marks if marker_kind(e["name"]) == best})
    first, end = starts[0], starts[windows] if len(starts) > windows else float("inf")
    kept = []
    for e in events:
        if e.get("cat") == "ac2g" or e.get("ph") in ("s", "f"):
            continue
        if e.get("ph") == "X" and not first <= e["ts"] < end:
            continue
        slim = {k: e[k] for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur") if k in e}
        args = {k: e["args"][k] for k in KEEP_ARGS if k in e.get("args", {})}
        if args:
            slim["args"] = args
        kept.append(slim)
    out = {"deviceProperties": doc.get("deviceProperties", []), "traceEvents": kept}
    with gzip.open(dst, "wt", compresslevel=9) as f:
        json.dump(out, f, separators=(",", ":"))


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("-o", "--out", type=Path, required=True)
    b.add_argument("--call", action="append", default=[], help="ORIGIN=FOLDER")
    b.add_argument("--session", action="append", default=[], type=Path)
    b.add_argument("--committed", action="append", default=[], help="ID=FILE: a cut trace committed for it")
    t = sub.add_parser("table")
    t.add_argument("corpus", type=Path)
    c = sub.add_parser("cut")
    c.add_argument("src", type=Path)
    c.add_argument("dst", type=Path)
    c.add_argument("--windows", type=int, default=2)
    args = p.parse_args()
    if args.cmd == "build":
        committed = dict(_split(spec) for spec in args.committed)
        rows = [r for spec in args.call for r in call_rows(*_split(spec), committed)]
        rows += [r for path in args.session for r in session_rows(path)]
        for r in rows:
            r["trace_file"] = committed[r["id"]].name if r["id"] in committed else None
        corpus = [CorpusTrace.model_validate(r) for r in rows]
        args.out.write_text(json.dumps([c.model_dump(mode="json") for c in corpus], indent=0) + "\n")
        print(f"{len(corpus)} traces -> {args.out}")
    elif args.cmd == "table":
        corpus = [CorpusTrace.model_validate(r) for r in json.loads(args.corpus.read_text())]
        print(table(leave_one_out(corpus)))
    else:
        cut(args.src, args.dst, args.windows)


def _split(spec: str) -> tuple[str, Path]:
    key, _, value = spec.partition("=")
    return key, Path(value)


if __name__ == "__main__":
    main()
