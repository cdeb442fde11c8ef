"""Sessions in a shared store are authenticated, not trusted (docs/SECURITY.md, "store peer").

What a session would execute is read from its checkpoints: its whole `LoopState` (target, options
with their paths, launch state, proposals) and the graph's own state (what runs next). This module
is the pure part: this user's key (`$PERFLOOP_HOME/signing.key`, 0600, made once, never in the
store), the digests of every state field and of the graph, their HMAC (`SIGNATURE` in a
checkpoint's metadata), pending writes' records, and why a stored state is not what this key
signed. agent/sessions/trust/saver.py signs what the checkpointer writes and checks what it reads,
once before a command acts (pinned) and again wherever the graph reads."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.errors import ConfigError
from tools.secrets import redact_bytes

if TYPE_CHECKING:  # loaded where a state is read: `perfloop sessions` checks signatures without it
    from state.sessions.loop import LoopState

KEY_FILE = "signing.key"
SIGNATURE = "perfloop_signature"
"""The checkpoint metadata key holding the signed digests of its state."""
WRITES = "~writes"
"""A signed field (not a state field) saying the checkpoint's pending writes are signed too."""
GRAPH = "~graph"
"""A signed field: the digest of the checkpoint as LangGraph stores it (`graph_digest`: every
channel's value and version, what each node has seen, the updated channels, the pending tasks,
its id and its parent's). A checkpoint without it was signed before perfloop signed the graph."""
SEQ = "~seq"
"""A signed field: the checkpoint's number in its session (the highest this machine signed is
kept under $PERFLOOP_HOME, `agent/sessions/trust/ledger.py`: a signed checkpoint older than that read
back as the latest is a rollback)."""
META = (WRITES, GRAPH, SEQ)
ANOTHER_KEY = "its signature is another key's (another machine's or user's session, a copy, or a forgery)"
BEFORE_GRAPH = (
    "it was checkpointed before perfloop signed the graph's own state (what runs next), so a store "
    "peer could have changed that"
)
"""Why a session this key signed before issue 56 is refused (its fields are this key's: `--trust`
continues it where it was signed, its folder as signed)."""


def key_problem(home: Path) -> str | None:
    """Why `home`'s key file cannot be this user's key (pure but for a stat and a read), or None:
    missing, not a plain file, not the user's, readable by others, empty or not 64 hex digits.
    Each is "not signed by this user" (fail closed): nothing verifies under an empty key."""
    path = home / KEY_FILE
    try:
        st = path.lstat()
    except FileNotFoundError:
        return f"this machine has no key ({path} was never made: no session was started here)"
    except OSError as exc:
        return f"its key file {path} cannot be read ({exc.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return f"its key file {path} is not a plain file (a link or a folder): remove it"
    if st.st_uid != os.getuid():
        return f"its key file {path} belongs to another user (uid {st.st_uid}): remove it"
    if stat.S_IMODE(st.st_mode) & 0o077:
        mode = oct(stat.S_IMODE(st.st_mode))[2:].rjust(4, "0")
        return (
            f"its key file {path} is mode {mode}, readable by others (anyone who read it can sign): "
            f"remove it (a new key is made; sessions it signed need --trust) or, if nobody else "
            f"could read it, chmod 600 it"
        )
    raw = path.read_bytes().strip()
    if not raw:
        return f"its key file {path} is empty: remove it (a new key is made at the next session)"
    if not re.fullmatch(rb"[0-9a-f]{64}", raw):
        return f"its key file {path} is malformed (not 64 hex digits): remove it or copy the right one"
    return None


def key_here(home: Path) -> bytes | None:
    """This user's key if it was made and is sound (`key_problem`), else None: verifying makes
    none (nothing is written then) and never verifies under an empty or public key."""
    return None if key_problem(home) is not None else (home / KEY_FILE).read_bytes().strip()


def user_key(home: Path) -> bytes:
    """This user's signing key (made once: 32 random bytes, hex, mode 0600 in `home`); a key file
    that is there but unsound (`key_problem`) is refused in one line, never replaced."""
    path = home / KEY_FILE
    if not path.exists():  # made whole, then linked in: no reader ever sees it half-written
        tmp = home / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process or thread made it first: that one is the key
        finally:
            tmp.unlink()
    if (why := key_problem(home)) is not None:
        raise ConfigError(f"cannot sign this session: {why}; nothing was run")
    return path.read_bytes().strip()


def _canon(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def bound_fields(state: LoopState) -> dict[str, object]:
    """What the session would execute, field by field (pure): every option and target field
    under its own name (`options.approve`, `target.launch`), then every other state field (the
    approval request a paused session shows is rebuilt from these by the step that made it).
    Values at their default are left out, so a field added to a state model later (with a
    default) leaves the signatures of sessions checkpointed before it as they were."""
    data = state.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    out: dict[str, object] = {f"options.{k}": v for k, v in data.pop("options").items()}
    out |= {f"target.{k}": v for k, v in data.pop("target").items()}
    return out | data


def digests(state: LoopState) -> dict[str, str]:
    """sha256 of each bound field, with known secrets masked as the checkpoint serializer masks
    them (same-length `*`), so a state hashes alike before it is stored and once read back."""
    return {k: field_digest(v) for k, v in bound_fields(state).items()}


def field_digest(value: object) -> str:
    """The signed digest of one bound field's value (`digests`) (pure)."""
    return hashlib.sha256(redact_bytes(_canon(value).encode())).hexdigest()


def binding_digest(fields: dict[str, str]) -> str:
    """The one digest of every bound field (pure): what `perfloop show` prints and `--trust` takes."""
    return hashlib.sha256(_canon(fields).encode()).hexdigest()[:16]


def _mac(key: bytes, session_id: str, fields: dict[str, str]) -> str:
    return hmac.new(key, _canon({"session": session_id, "fields": fields}).encode(), "sha256").hexdigest()


def seal(key: bytes, session_id: str, fields: dict[str, str]) -> dict:
    """The store record that binds `fields` to the session under `key`."""
    return {"fields": fields, "hmac": _mac(key, session_id, fields)}


def problem(
    key: bytes | None, session_id: str, record: dict | None, now: dict[str, str], home: Path | None = None
) -> str | None:
    """Why the stored state `now` is not what this key signed for the session (pure but for the
    key file's check when `key` is None), or None. No key (or an unsound one) is never a match;
    changed fields are named before "signed before the graph was" (they are what would run)."""
    unsigned = f"session {session_id} is not signed by this user's key ($PERFLOOP_HOME/{KEY_FILE}): "
    if not key:
        why = key_problem(home) if home is not None else None
        return unsigned + (why or "this machine has no sound key")
    if not isinstance(record, dict) or not isinstance(record.get("fields"), dict):
        return unsigned + "it carries no signature (checkpointed before perfloop signed sessions, or by hand)"
    signed = record["fields"]
    if not hmac.compare_digest(str(record.get("hmac", "")), _mac(key, session_id, signed)):
        return unsigned + ANOTHER_KEY
    changed = sorted(k for k in signed.keys() - set(META) | now.keys() if signed.get(k) != now.get(k))
    if changed:
        shown = ", ".join(changed[:8]) + (f" (+{len(changed) - 8} more)" if len(changed) > 8 else "")
        return f"session {session_id} changed in the store since this user last ran it: {shown} changed"
    return None if GRAPH in signed else unsigned + BEFORE_GRAPH


def seal_write(key: bytes, where: dict[str, str], channel: str, typed: tuple[str, bytes]) -> dict:
    """The record that binds one pending write (its channel and serialized value `typed`) to its
    session, checkpoint and task (`where`: thread_id, checkpoint_ns, checkpoint_id, task_id)."""
    what = {**where, "channel": channel, "value": hashlib.sha256(typed[0].encode() + typed[1]).hexdigest()}
    return {**what, "hmac": hmac.new(key, _canon(what).encode(), "sha256").hexdigest()}


def signs_writes(key: bytes | None, session_id: str, record: object) -> bool:
    """Whether a checkpoint's signature `record` is this key's and says its pending writes are signed."""
    return (ours(key, session_id, record) or {}).get(WRITES) == "signed"


def ours(key: bytes | None, session_id: str, record: object) -> dict[str, str] | None:
    """The signed fields of a checkpoint's signature `record` if this (sound) key made it."""
    if not key or not isinstance(record, dict) or not isinstance(record.get("fields"), dict):
        return None
    good = hmac.compare_digest(str(record.get("hmac", "")), _mac(key, session_id, record["fields"]))
    return record["fields"] if good else None


def graph_digest(
    checkpoint: Mapping[str, Any], config: Mapping[str, Any], parent: Mapping[str, Any] | None, dumps: Any
) -> str:
    """sha256 of a checkpoint as LangGraph stores it (pure but for `dumps`, the serializer's
    `dumps_typed`): its id, namespace and parent's id, every channel's version, the value of every
    channel that is not a state field (as the serializer writes it: control channels such as
    `branch:to:*` and `__pregel_tasks` with the `Send`s of trials; state fields are bound one by
    one by `digests`, so a changed one is named), `versions_seen` and `updated_channels`."""
    from state.sessions.loop import LoopState  # not at the top: see there

    c, p = config.get("configurable", {}), (parent or {}).get("configurable", {})
    values = {
        k: hashlib.sha256(t.encode() + b).hexdigest()
        for k, v in checkpoint.get("channel_values", {}).items()
        if k not in LoopState.model_fields  # state fields: bound one by one (`digests`), named when changed
        for t, b in [dumps(v)]
    }
    what = {
        "id": checkpoint.get("id"),
        "ns": c.get("checkpoint_ns") or "",
        "parent": p.get("checkpoint_id"),
        "versions": checkpoint.get("channel_versions", {}),
        "seen": checkpoint.get("versions_seen", {}),
        "updated": sorted(checkpoint.get("updated_channels") or []),
        "values": values,
    }
    return hashlib.sha256(_canon(what).encode()).hexdigest()


def unsigned_writes(
    key: bytes, where: dict[str, str], writes: list, signed: list[dict], dumps: Any
) -> list[str]:
    """`channel (task)` of each pending write (task_id, channel, value) no valid record of `signed`
    binds to `where` (pure but for `dumps`, the serializer's `dumps_typed`)."""
    good = {
        (r.get("task_id"), r.get("channel"), r.get("value"))
        for r in signed
        if isinstance(r, dict)
        and all(r.get(k) == v for k, v in where.items())
        and hmac.compare_digest(
            str(r.get("hmac", "")),
            hmac.new(key, _canon({k: v for k, v in r.items() if k != "hmac"}).encode(), "sha256").hexdigest(),
        )
    }
    bad = []
    for task_id, channel, value in writes:
        typed = dumps(value)
        digest = hashlib.sha256(typed[0].encode() + typed[1]).hexdigest()
        if (task_id, channel, digest) not in good:
            bad.append(f"{channel} (task {str(task_id)[:8]})")
    return bad


def refusal(session_id: str, why: str, digest: str, trust: str | None) -> ConfigError:
    """The one line that refuses to act on an unsigned or changed session (`digest`: what `show` prints)."""
    wrong = f"--trust {trust} is not its digest now; " if trust else ""
    return ConfigError(
        f"{why}; {wrong}nothing was run: review what it runs with `perfloop show {session_id}`, then "
        f"repeat the command with --trust {digest} to run it on this machine as shown"
    )


def check(
    session_id: str,
    values: dict,
    metadata: dict | None,
    home: Path,
    trust: str | None,
    shown: str | None = None,
    why: str | None = None,
) -> bool:
    """Refuse a checkpoint (its state `values` and `metadata`) this user's key did not sign (`why`,
    else `problem`'s), unless `trust` is `shown` (the digest `perfloop show` printed: fields, graph
    and pending writes, agent/sessions/trust/saver.py; the fields' alone without it) and its
    session folder is the one this machine computes for it (`home/sessions/ID`: no store row
    picks where its logs and traces are written): then True (accepted by the human's word)."""
    from state.sessions.loop import LoopState  # not at the top: see there

    state = LoopState.model_validate(values)
    now = digests(state)
    why = why or problem(key_here(home), session_id, (metadata or {}).get(SIGNATURE), now, home)
    if why is None:
        return False
    if trust != (shown := shown or binding_digest(now)):
        raise refusal(session_id, why, shown, trust)
    if why.endswith(BEFORE_GRAPH):  # every field as this key signed it (compared first): the user's paths
        return True
    if (here := (home / "sessions" / session_id).resolve()) != state.options.session_dir.resolve():
        raise ConfigError(
            f"--trust: session {session_id} keeps its logs and traces in {state.options.session_dir}, "
            f"not in this machine's {here}; nothing was run: continue it where that folder is"
        )
    there = state.options.host_dir
    if there is not None and (
        not there.is_absolute()
        or ".." in there.parts
        or there.parts[-3:] != (".perfloop", "sessions", session_id)
    ):
        raise ConfigError(
            f"--trust: session {session_id} keeps its server's files on its host in {there}, not in "
            f"~/.perfloop/sessions/{session_id} there; nothing was run: start a new session on that target"
        )
    return True
