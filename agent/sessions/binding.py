"""What a human approves is what runs (docs/SECURITY.md, "store peer"): digests that bind an approval
to the patch and launch command shown, and a session to the target it was created with.

A store shared by several machines can be written by any of them: a peer could rewrite a paused
session's proposal or launch command in the checkpoint. Two checks:
- `view`: the approval request with `argv_now` (the exact argv each candidate runs), `env_now`
  (the environment it is given) and `digest` (of the target, the options, every patch and argv); `perfloop approve --digest D` (the command the view
  prints, and the approval page) refuses when the stored state no longer gives D.
- `check_target`: the machine that created a session keeps the digest of its target (launch
  command, repo, host, proposer; not the profile site, which set-up fills in) in the session's
  folder under $PERFLOOP_HOME, out of the store's reach; resuming or approving it there refuses a
  stored target that no longer gives it. Every checkpoint is moreover signed with the user's key
  (signing.py), checked before any session is continued.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from agent.steps.approval import approval_request, batch_request
from state.config.options import LoopOptions
from state.sessions.loop import LoopState
from tools.errors import ConfigError

TARGET_FILE = "target.sha256"
ADDED_SINCE_SHOWN = frozenset(
    {
        "short_aa_pairs",
        "schedule_gate",
        "first_verdict",
        "search_grid",
        "output_noise_store",
        "confirm_alone",
        "search_without_math",
        "playbook_files",
        "launches_past_cuts",
        "numerics_math_distance",
        "precise_small",
        "search_worst_trial",
        "search_block_measured",
        "numerics_unit_floor",
    }
)
"""`LoopOptions` fields added after sessions paused with a digest shown to a person: at their
default they are left out of the digest, so what a paused session showed stays its digest."""


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


TARGET_ADDED = {
    "correctness": (
        "numerics_prompts",
        "numerics_tokens",
        "precision_reference",
        "task",
        "task_items",
        "task_max_tokens",
        "task_margin",
    )
}
"""Target fields added after sessions were made (issue 61): at their default they are left out of
the digest, so a session made before them keeps its target digest (and its approval digest)."""


def target_digest(state: LoopState) -> str:
    """The digest of what the session's target makes run (pure)."""
    dump = state.target.model_dump(mode="json", exclude={"profile"})
    for section, names in TARGET_ADDED.items():
        model = type(getattr(state.target, section))
        for name in names:
            if dump[section].get(name) == model.model_fields[name].get_default(call_default_factory=True):
                dump[section].pop(name, None)
    return _digest(dump)


def rebuilt(state: LoopState, stored: dict) -> dict:
    """The approval request as the step that paused builds it from the (signed) state, not as a
    store row holds it: what is shown is what approving runs (pure)."""
    if stored.get("candidates") and state.candidates:
        return batch_request(state)
    return approval_request(state) if state.proposal is not None and not stored.get("candidates") else stored


def view(state: LoopState, pending: dict) -> dict:
    """The approval request `pending` of the paused session `state`, with the argv each candidate
    runs (`argv_now`; per candidate in a batch) and the digest that binds an approval to them (pure)."""
    views = pending.get("candidates") or [pending]
    runs = [{"diff": v.get("diff", ""), "argv": v.get("launch_argv") or state.argv} for v in views]
    env = {"env": state.target.launch.env, "pass_env": state.target.launch.pass_env}
    options = {  # approve, max_iterations, python, paths, ...
        k: v
        for k, v in state.options.model_dump(mode="json").items()
        if not (
            k in ADDED_SINCE_SHOWN and v == LoopOptions.model_fields[k].get_default(call_default_factory=True)
        )
    }
    digest = _digest({"target": target_digest(state), "runs": runs, "options": options})[:16]
    out = pending | {"argv_now": runs[0]["argv"], "env_now": env, "digest": digest}
    if pending.get("candidates"):
        out["candidates"] = [
            c | {"argv_now": r["argv"]} for c, r in zip(pending["candidates"], runs, strict=True)
        ]
    return out


def check_digest(session: str, shown: str, now: dict) -> None:
    """Refuse an approval of what was shown as `shown` when the stored state gives another digest."""
    if shown != now["digest"]:
        raise ConfigError(
            f"--digest {shown}: session {session} changed in the store since it was shown (now "
            f"{now['digest']}): its patch or launch command is not the one reviewed; see "
            f"`perfloop show {session}`, then approve what it shows"
        )


def check_target(folder: Path, state: LoopState, new: bool) -> None:
    """Record the target's digest in the session's local `folder` (a new session), or refuse a
    stored target that no longer gives the digest recorded there."""
    path = folder / TARGET_FILE
    if new:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(target_digest(state) + "\n")
        return
    if path.is_file() and path.read_text().strip() != target_digest(state):
        raise ConfigError(
            f"session {state.session_id}: its target in the store (launch command, repo, host or "
            f"proposer) is not the one it was created with on this machine ({path}); a store peer "
            f"changed it: see `perfloop show {state.session_id}`; nothing was run"
        )
