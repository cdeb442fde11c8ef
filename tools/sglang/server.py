"""Talking to a running SGLang server: /start_profile, per-rank traces.

Body and path choices are pure functions; the two I/O helpers are thin (tools.http).
"""

from __future__ import annotations

import re
from pathlib import Path

from tools.errors import ServerError, TraceError
from tools.http import post_json

START_STEP_SINCE = (0, 5, 8)
"""Oldest release whose ProfileReq we read with `start_step` (0.5.8, 0.5.9 and 0.5.23 have it)."""

_RANK = re.compile(r"-TP-(\d+)(?:-DP-(\d+))?(?:-PP-(\d+))?(?:-EP-(\d+))?")


def start_profile_body(
    out_dir: Path,
    profile_id: str,
    num_steps: int,
    version: tuple[int, int, int],
    start_step: int | None = None,
) -> dict:
    """The JSON body of POST /start_profile for this release (pure).

    `start_step` (skip that many forward steps before recording) is sent only where the release's
    ProfileReq has it; `record_shapes` is always on, since playbook signatures match input dims.
    """
    body = {
        "output_dir": str(out_dir),
        "num_steps": num_steps,
        "activities": ["CPU", "GPU"],
        "profile_id": profile_id,
        "record_shapes": True,
    }
    if start_step is not None and version >= START_STEP_SINCE:
        body["start_step"] = start_step
    return body


def start_profile(base_url: str, body: dict) -> None:
    """POST /start_profile; ServerError with the server's answer when it is not 200."""
    try:
        code, text = post_json(base_url + "/start_profile", body)
    except OSError as err:
        raise ServerError(f"/start_profile at {base_url} failed: {err}; is the server up?") from err
    if code != 200:
        raise ServerError(
            f"/start_profile answered HTTP {code}: {text[:200].strip()}; use profile method "
            "`patch` (perfloop instrument) if this build lacks or hangs on the API"
        )


def rank_of(name: str) -> tuple[int, int, int, int] | None:
    """(tp, dp, pp, ep) ranks from a trace name such as `p1-TP-3-DP-1.trace.json.gz` (pure)."""
    found = _RANK.search(name)
    return tuple(int(g or 0) for g in found.groups()) if found else None  # type: ignore[return-value]


def rank_traces(out_dir: Path, profile_id: str, tp_size: int) -> dict[int, Path]:
    """TP rank -> trace of this profile (DP/PP/EP rank 0); TraceError until every TP rank has one."""
    found: dict[int, Path] = {}
    for path in sorted(out_dir.glob(f"*{profile_id}*-TP-*.trace.json.gz")):
        ranks = rank_of(path.name)
        if ranks and ranks[1:] == (0, 0, 0) and ranks[0] < tp_size:
            found[ranks[0]] = path
    missing = sorted(set(range(tp_size)) - set(found))
    if missing:
        raise TraceError(
            f"profile {profile_id}: no trace yet for TP rank(s) {missing} in {out_dir}; "
            "wait for the server to finish writing, or check its log"
        )
    return found
