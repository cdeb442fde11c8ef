"""One speedup, said the same way everywhere (the summary table, `perfloop sessions`, `--json`):
the judged figure with its interval heads; baseline -> final is a secondary figure, named unjudged;
a session that measured or kept nothing says so. And the best configuration as a command to copy
(pure functions of a `Summary`)."""

from __future__ import annotations

import shlex

from state.sessions.session import Summary

OWN_FLAGS = ("--profiler-config.",)
"""Prefixes of launch flags that serve perfloop's profiling, not the server's speed: left out of the
configuration a user copies."""
PORT = "8000"
"""What `{port}` reads as in the command to copy (perfloop picks one at each launch)."""


def judged(s: Summary) -> str | None:
    """`13.19x [8.58, 21.14]`: the decisive candidate's speedup over its reference with its 95%
    interval, as the rule judged it; None where no candidate was judged (summaries recorded before
    `speedup_judged` show the interval alone)."""
    if s.speedup_ci is None:
        return None
    low, high = s.speedup_ci
    figure = f"{s.speedup_judged:.2f}x " if s.speedup_judged is not None else ""
    return f"{figure}[{low:.2f}, {high:.2f}]"


def unmeasured(s: Summary) -> str:
    """Why a session has no judged speedup, in a few words."""
    if s.tpot_ms_before is None and s.objective_before is None:
        return "not measured (no baseline)"
    if s.rejected or s.decision is not None:
        return "none kept (no candidate accepted)"
    return "not measured (no candidate measured)"


def headline(s: Summary) -> str:
    """The speedup row: the judged figure, or why there is none."""
    figure = judged(s)
    if figure is None:
        return unmeasured(s)
    if not s.accepted:
        return f"none kept (the last candidate judged {figure}, {s.verdict or 'not accepted'})"
    return f"{figure} 95% CI (judged: decisive candidate vs its reference)"


def baseline_final(s: Summary) -> float | None:
    """The secondary, unjudged ratio of the baseline (measured alone, at the start) to the final
    tree; None where nothing was kept (a ratio of the baseline to itself says nothing)."""
    return s.speedup if s.accepted and s.speedup is not None else None


def best_command(s: Summary) -> str | None:
    """The final launch command to copy: shell-quoted, perfloop's own profiling flags left out,
    `{port}` as 8000; None without a launch command."""
    argv, skip = [], False
    for arg in s.launch_argv:
        if skip:
            skip = False
            continue
        if arg.startswith(OWN_FLAGS):
            skip = "=" not in arg  # `--profiler-config.x VALUE`: its value goes too
            continue
        argv.append(arg.replace("{port}", PORT))
    return shlex.join(argv) if argv else None


def summary_json(s: Summary) -> dict:
    """A summary as `--json` prints it: `speedup` is the judged figure of the kept candidate (None
    where nothing was kept or judged: never 1 for nothing), `speedup_ci` its interval, `speedup_baseline_final` the unjudged
    ratio, `best_command` the configuration to copy."""
    out = s.model_dump(mode="json")
    out["speedup"] = s.speedup_judged if s.speedup_ci is not None and s.accepted else None
    out["speedup_baseline_final"] = baseline_final(s)
    out["best_command"] = best_command(s)
    return out


HEADLINE_KEYS = (
    "session",
    "status",
    "speedup",
    "speedup_ci",
    "speedup_baseline_final",
    "verdict",
    "accepted",
    "said",
)
"""The `headline` object of `--json` (`sessions`, `show`, `replay`, and a run's summary): one shape."""


def headline_json(s: Summary | None, session: str, status: str) -> dict:
    """A session's headline as every `--json` gives it, under the key `headline` (docs/usage.md):
    `speedup` the judged figure of the kept candidate (None where nothing was kept or judged),
    `speedup_ci` its interval, `speedup_baseline_final` the unjudged ratio, `verdict`, `accepted`
    (the playbooks kept) and `said` (the summary's speedup row in words)."""
    if s is None:
        return dict.fromkeys(HEADLINE_KEYS) | {"session": session, "status": status, "accepted": []}
    full = summary_json(s)
    out = {k: full.get(k) for k in HEADLINE_KEYS}
    return out | {"session": session, "status": status, "said": headline(s)}


def _flags(argv: list[str]) -> dict[str, str | None]:
    """`--flag value`, `--flag=value` and bare `--flag` of a command line; the last of a repeated
    flag wins, as argparse reads it (pure)."""
    out: dict[str, str | None] = {}
    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            continue
        name, eq, value = arg.partition("=")
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        out[name] = value if eq else (nxt if nxt is not None and not nxt.startswith("--") else None)
    return out


def flag_change(before: list[str], after: list[str]) -> str:
    """What a launch-option proposal changes, flag by flag: `--max-num-seqs 1 -> 8`, `--x (added)
    3`, `--y removed` (pure); `no launch flag changed` where none did."""
    old, new = _flags(before), _flags(after)
    show = lambda v: "(set)" if v is None else v
    lines = [
        f"{k} {show(old[k])} -> {show(v)}" if k in old else f"{k} (added) {show(v)}"
        for k, v in new.items()
        if k not in old or old[k] != v
    ]
    lines += [f"{k} removed" for k in old if k not in new]
    return "; ".join(lines) or "no launch flag changed"
