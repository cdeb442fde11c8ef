"""How sessions look in a terminal (rich) and in `--json`."""

from __future__ import annotations

import re
import shlex

from rich.console import Console

from agent.cli.output import diff_text, shell_lines, table
from agent.cli.targetcheck import dummy_weights
from agent.cli.terminal import perfloop, styled
from agent.report.headline import (
    baseline_final,
    best_command,
    flag_change,
    headline,
    headline_json,
    judged,
    summary_json,
)
from state.sessions.session import SessionInfo, Summary
from tools.secrets import outside
from tools.workspace.hidden import visible

NOT_MEASURED = "not measured"


def _ms(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:.1f} ms"


def _num(value: float | None) -> str:
    return NOT_MEASURED if value is None else f"{value:.2f}"


def _change(s: Summary, before: str, after: str, note: str = "", sep: str = " -> ") -> str:
    """`before -> after (note)`; with nothing accepted, the baseline's figures alone, saying so."""
    if s.accepted:
        return f"{before}{sep}{after}" + (f" ({note})" if note else "")
    if before == NOT_MEASURED:
        return before
    tried = s.rejected or s.decision is not None
    return f"{before} (baseline; {'no candidate accepted' if tried else 'no candidate measured'})"


def _outputs(s: Summary) -> str:
    """The final outputs against the baseline's, or that none were compared (blind on dummy weights)."""
    if s.outputs_identical is None:
        if s.accepted and s.output_gate:  # timing texts at concurrency: the schedule moves them
            return "judged by the output gate on the correctness set (timing texts move with the schedule)"
        return "not compared (no candidate accepted)"
    said = (
        "identical to the baseline's"
        if s.outputs_identical
        else "differ from the baseline's (see output gate)"
    )
    if dummy_weights(s.launch_argv) and (s.output_gate or "exact") == "exact":
        said += " (blind here: --load-format dummy weights give every prompt the same greedy output)"
    return said


def branch_words(branch: str | None, checkout: str | None) -> str:
    """The summary's branch row: the session branch, and where the checkout was given back (pure)."""
    if checkout is None:
        return branch or "-"
    kept = f"{branch} holds the accepted commits" if branch else "no commit kept"
    return f"{kept}; your checkout is back on {checkout}"


def summary(console: Console, s: Summary) -> None:
    """The end-of-run summary."""
    ratio = baseline_final(s)
    speed = "" if ratio is None else f"{ratio:.2f}x baseline -> final, not judged"
    rows = [
        ("TPOT", _change(s, _ms(s.tpot_ms_before), _ms(s.tpot_ms_after), speed)),
        ("TTFT", _change(s, _ms(s.ttft_ms_before), _ms(s.ttft_ms_after))),
        ("decision", s.decision or "-"),
        ("mechanism", "\n".join(s.mechanisms) or "not checked (no profile after an accepted patch)"),
        ("measured by", s.measured_by or "-"),
        ("outputs", _outputs(s)),
        ("output gate", s.output_gate or "exact"),
        ("correctness set", s.correctness_set or "-"),
        ("accepted", ", ".join(s.accepted) or "none"),
        ("rejected / failed", ", ".join(s.rejected) or "none"),
        ("commits", ", ".join(c[:10] for c in s.commits) or "none"),
        ("branch", branch_words(s.branch, s.checkout)),
        ("repo", str(s.repo)),
        ("server launches", str(s.server_launches)),
        ("profile method", s.profile_method),
        ("profiles taken", str(s.iterations)),
        ("stopped because", s.stop_reason),
    ]
    if s.workload:
        serving = _change(s, s.serving_before or NOT_MEASURED, s.serving_after or NOT_MEASURED, sep="\n-> ")
        rows.insert(2, ("workload", f"{s.workload}\n{serving}"))
    if s.beside_before or s.beside_after:  # bench_serving on the same launches, beside the client
        beside = _change(s, s.beside_before or NOT_MEASURED, s.beside_after or NOT_MEASURED, sep="\n-> ")
        rows.insert(3, ("beside (not judged)", beside))
    if s.objective:  # the speedup is the objective's: TPOT is its p50 and p99 at the concurrency
        rows[0] = ("TPOT p50", _change(s, _ms(s.tpot_ms_before), _ms(s.tpot_ms_after)))
        rows.insert(1, ("TPOT p99", _change(s, _ms(s.tpot_ms_p99_before), _ms(s.tpot_ms_p99_after))))
        rows.insert(0, (s.objective, _change(s, _num(s.objective_before), _num(s.objective_after), speed)))
    rows.insert(0, ("speedup", headline(s)))  # the one headline: the judged figure, or why none
    if s.llm_calls:
        rows.insert(-1, ("model calls / tokens", f"{s.llm_calls} / {s.llm_tokens}"))
    if s.trials:
        rows.insert(-1, ("parallel trials", "\n".join(s.trials)))
    if s.search_trials:
        rows.insert(-1, ("search trials", "\n".join(s.search_trials)))
    if s.floors:  # the baseline's and the final step against (weights + live KV) over the bandwidth
        rows.insert(-1, ("bandwidth floor", "\n".join(floor_lines(s, "baseline", "final"))))
    if s.chain is not None:  # --proposer chain: each link against the tree before it, the whole measured
        rows.insert(
            1, ("chain", "\n".join([s.chain.line().removeprefix("chain: "), *floor_lines(s, "link")]))
        )
    console.print(
        table("", "", rows=rows, title=f"perfloop session {s.session} ({s.status})", show_header=False)
    )
    if (command := best_command(s)) is not None:  # whole, never cut by the table's width
        label = "best configuration" if s.accepted else "launch command (unchanged)"
        console.print(f"{label}, to copy:", highlight=False)
        console.print(
            shell_lines(command, console.width, "  "), highlight=False, soft_wrap=True, markup=False
        )
    me = perfloop()
    console.print(
        f"next: {me} show {s.session}\n      {me} report {s.session} -o report.html",
        highlight=False,
        soft_wrap=True,
    )


def floor_lines(s: Summary, *roles: str) -> list[str]:
    """`final: step 12.0 ms, floor 4.06 ms (...): 3.0x above`, one per step of `roles` (pure)."""
    return [f"{f.label}: {f.line()}" for f in s.floors if f.role in roles]


def approval(console: Console, req: dict) -> None:
    """What a paused session asks a human to approve."""
    title = outside(req["title"])  # a model's words, like the rationale: masked as any child's text
    console.print(styled((f"Session {req['session']} waits for approval", "bold"), f": {title}"))
    if req.get("auto_approval"):
        console.print(styled((req["auto_approval"], "bold yellow")))
    if req.get("servers"):
        console.print(req["servers"], highlight=False)
    if req.get("proposer") == "llm":
        console.print(
            styled(
                ("written by a model, not a playbook", "bold yellow"),
                f": {req['model']}, {req['llm_tokens']} tokens, {req['repairs']} repair round(s); review the diff",
            ),
            highlight=False,
        )
        console.print("model's rationale:", highlight=False)
    console.print(outside(req["explanation"]), highlight=False)
    launch = req.get("launch_argv") is not None
    gain = req.get("expected_gain_ms")
    if gain is not None:
        console.print(f"expected gain: {gain:.1f} ms/token")
    elif not (launch and req.get("predicted_speedup") is not None):  # a launch option has its bound
        console.print(f"expected gain: {req['expected_gain_share']:.0%} of decode time")
    if launch:
        before = req.get("launch_argv_before") or []
        console.print("launch options: " + flag_change(before, req["launch_argv"]), highlight=False)
        console.print("  now:      " + shlex.join(before), highlight=False, soft_wrap=True)
        console.print("  proposed: " + shlex.join(req["launch_argv"]), highlight=False, soft_wrap=True)
    else:
        console.print("files touched: " + ", ".join(req["files"]))
        if req.get("argv_now"):
            console.print("launch command: " + shlex.join(req["argv_now"]), highlight=False)
    if env := req.get("env_now"):
        pairs = " ".join(f"{k}={v}" for k, v in env["env"].items()) or "(none)"
        console.print(
            f"environment: {pairs}; passed from yours: {', '.join(env['pass_env']) or '(none)'}",
            highlight=False,
        )
    if req.get("predicted_speedup") is not None:
        paired = f", {req['paired_speedup']:.2f}x with {req['paired_with']}" if req.get("paired_with") else ""
        bound = "at most " if launch else ""
        console.print(f"predicted: {bound}{req['predicted_speedup']:.2f}x{paired}")
    for line in req.get("mechanisms", []):
        console.print(f"earlier accepted patch, predicted vs realized: {line}", highlight=False)
    for line in req.get("output_gate") or []:  # the policy, the engine's own yardstick, verdicts so far
        console.print(line, highlight=False)
    if not req["evidence"]:  # the last profile's diagnosis, shown here, or that there is none
        lines = req.get("diagnosis") or []
        said = "the last profile's diagnosis" if lines else "none recorded (no profile diagnosed it)"
        console.print("\n  ".join([f"evidence: {said}", *lines]), highlight=False, soft_wrap=True)
    rows = [
        (
            e["op"],
            str(e.get("dims")),
            f"{e['share']:.1%}",
            f"{e['self_us'] / 1000:.1f} ms",
            str(e["calls"]),
            e.get("location") or "-",
        )
        for e in req["evidence"]
    ]
    if rows:
        console.print(
            table("op", "dims", "share", "self time", "calls", "where", rows=rows, keep=0, title="evidence")
        )
    for e in req["evidence"]:
        console.print(e["note"], highlight=False)
    hunks = re.findall(r"^\+\+\+ b/(\S+)\n@@ -(\d+)", req["diff"], flags=re.M)
    if hunks:
        console.print("patch changes: " + ", ".join(f"{f}:{line}" for f, line in hunks))
    console.print(
        diff_text(visible(req["diff"])), soft_wrap=True, end=""
    )  # Text strips controls: show them first
    digest = f" --digest {req['digest']}" if req.get("digest") else ""
    me = perfloop()
    console.print(
        f"approve: {me} approve {req['session']}{digest}\nreject:  {me} reject {req['session']} --reason TEXT",
        highlight=False,
        soft_wrap=True,
    )
    if req.get("candidates"):
        ids = [c["playbook"] for c in req["candidates"]]
        console.print(
            f"a batch, tried at once on [[hosts]]: {', '.join(ids)}; pick with --only ID (repeatable)"
        )


def sessions(
    console: Console, infos: list[SessionInfo], held: dict[str, str], unverified: set[str] | None = None
) -> None:
    """`perfloop sessions`: a `running` session nobody holds was stopped (resume it); the rows of
    `unverified` (their status not backed by this user's signed checkpoint) say so."""
    rows = []
    for i in infos:
        s = i.summary
        status: str = i.status
        if i.id in held:
            status = f"{status} ({held[i.id]})"
        elif status == "running":
            status = "stopped (resume it)"
        elif status == "interrupted":
            status = "interrupted (resume it)"
        status += " (unverified)" if i.id in (unverified or ()) else ""
        rows.append(
            (
                i.id,
                i.created_at.strftime("%Y-%m-%d %H:%M"),
                i.target_name,
                i.host or "-",
                status,
                (judged(s) if s and s.accepted else None) or "-",  # the judged figure; none kept: -
                ", ".join(s.accepted) if s else "-",
            )
        )
    header = ("session", "created", "target", "host", "status", "speedup", "accepted")
    console.print(table(*header, rows=rows, keep=2, whole=(5,), below=(6,)))


def session_json(info: SessionInfo) -> dict:
    """A session as `--json` prints it (`sessions`, `show`): its summary's `speedup` the judged figure."""
    out = info.model_dump(mode="json")
    if info.summary is not None:
        out["summary"] = summary_json(info.summary)
    out["headline"] = headline_json(info.summary, info.id, info.status)
    return out


def runs(console: Console, bound: dict) -> None:
    """What the session runs on this machine, whole, and whether this user's key signed it."""
    console.print(styled(("runs on this machine:", "bold"), " " + shlex.join(bound["argv"])), highlight=False)
    env = " ".join(f"{k}={v}" for k, v in bound["env"].items()) or "(none)"
    console.print(
        f"  environment: {env}; passed from yours: {', '.join(bound['pass_env']) or '(none)'}",
        highlight=False,
    )
    console.print(f"  host: {bound['host']}", highlight=False)
    console.print("  options: " + ", ".join(f"{k}={v}" for k, v in bound["options"].items()), highlight=False)
    console.print(f"  runs next: {', '.join(bound.get('next') or []) or '(nothing)'}", highlight=False)
    for task in bound.get("tasks") or []:  # a `Send`: its own target and diff (the digest covers them)
        argv = shlex.join(task["argv"]) if task.get("argv") else "(no launch)"
        lines = len((task.get("diff") or "").splitlines())
        console.print(
            visible(f"  pending task {task['node']}: runs {argv}; diff of {lines} line(s)"), markup=False
        )
    for w in bound.get("writes") or []:
        console.print(
            visible(f"  pending write {w['channel']} (task {w['task']}): {w['value']}"), markup=False
        )
    if bound["signed"]:
        console.print(f"  signed by this user's key: yes (digest {bound['digest']})", highlight=False)
    elif bound["digest"] is not None:
        console.print(
            styled((f"  NOT signed by this user's key: {bound['unsigned_because']}", "bold red")),
            highlight=False,
        )
        console.print(
            f"  to run it here as shown, add --trust {bound['digest']} to approve|reject|resume|fork",
            highlight=False,
        )
