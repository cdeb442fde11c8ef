"""agent/sessions/trust/signing.py: a checkpoint's state is bound to the user's key field by field; a
changed field is named, another key's or a missing signature refused, `--trust` takes exactly
the digest of what is stored now; a secret in the state hashes alike before and after the
serializer masks it."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from agent.cli.target import load_target
from agent.sessions.checkpoint import serializer
from agent.sessions.trust.signing import GRAPH, SIGNATURE, binding_digest, check, digests, seal, user_key
from state.config.options import LoopOptions
from state.sessions.loop import LoopState
from tools.errors import ConfigError
from tools.secrets import register

DEMO_TOML = Path(__file__).resolve().parents[2] / "examples" / "targets" / "mla_server.toml"


def state(tmp_path: Path, **options) -> LoopState:
    opts = LoopOptions(
        session_dir=tmp_path / "sessions" / "s1", python="python3", approve="manual", **options
    )
    return LoopState(session_id="s1", target=load_target(DEMO_TOML), options=opts)


def test_the_key_is_made_once_private_and_a_change_is_named(tmp_path: Path) -> None:
    key = user_key(tmp_path)
    assert user_key(tmp_path) == key and stat.S_IMODE((tmp_path / "signing.key").stat().st_mode) == 0o600
    signed = state(tmp_path)
    meta = {SIGNATURE: seal(key, "s1", {**digests(signed), GRAPH: "0" * 64})}
    values = signed.model_dump(mode="json")
    assert check("s1", values, meta, tmp_path, None) is False  # signed: passes on its signature
    changed = signed.model_copy(
        update={"options": signed.options.model_copy(update={"approve": "auto", "python": "/tmp/x"})}
    )
    with pytest.raises(ConfigError, match=r"options\.approve, options\.python changed; nothing was run"):
        check("s1", changed.model_dump(mode="json"), meta, tmp_path, None)
    now = binding_digest(digests(changed))
    assert check("s1", changed.model_dump(mode="json"), meta, tmp_path, now) is True  # reviewed, trusted
    elsewhere = changed.model_copy(
        update={"options": changed.options.model_copy(update={"session_dir": tmp_path / ".ssh"})}
    )
    with pytest.raises(ConfigError, match="keeps its logs and traces in .*/.ssh, not in this machine's"):
        check("s1", elsewhere.model_dump(mode="json"), meta, tmp_path, binding_digest(digests(elsewhere)))
    for far in ("/home/u/.ssh", "/home/u/.perfloop/sessions/s1/../../../.ssh", "rel/.perfloop/sessions/s1"):
        remote = changed.model_copy(
            update={"options": changed.options.model_copy(update={"host_dir": Path(far)})}
        )  # the server's files on an SSH host: where the session would write there
        with pytest.raises(ConfigError, match="keeps its server's files on its host in"):
            check("s1", remote.model_dump(mode="json"), meta, tmp_path, binding_digest(digests(remote)))
    ok = changed.model_copy(
        update={
            "options": changed.options.model_copy(update={"host_dir": Path("/home/u/.perfloop/sessions/s1")})
        }
    )
    assert check("s1", ok.model_dump(mode="json"), meta, tmp_path, binding_digest(digests(ok))) is True
    with pytest.raises(
        ConfigError, match="is not signed by this user's key .*its signature is another key's"
    ):
        check("s2", values, meta, tmp_path, None)  # a copy under another id
    with pytest.raises(ConfigError, match="it carries no signature"):
        check("s1", values, {}, tmp_path, None)
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(ConfigError, match="this machine has no key"):
        check("s1", values, meta, other, None)  # another user's home: no key made there (fail closed)
    assert not (other / "signing.key").exists()  # verifying writes nothing


def test_a_secret_in_the_state_hashes_alike_once_the_serializer_masked_it(tmp_path: Path) -> None:
    secret = "sk-sign-" + os.urandom(6).hex()
    register(secret)
    s = state(tmp_path).model_copy(update={"error": f"server said {secret}"})
    serde = serializer()
    back = serde.loads_typed(serde.dumps_typed(s))
    assert secret not in str(back.error) and digests(back) == digests(s)


def test_a_session_signed_before_the_graph_was_is_refused_saying_how_to_continue(tmp_path: Path) -> None:
    """Signed by this key, but before the graph's own state was (no `~graph`): refused, with
    `perfloop show` and the `--trust DIGEST` that continues it."""
    key, signed = user_key(tmp_path), state(tmp_path)
    meta, values = {SIGNATURE: seal(key, "s1", digests(signed))}, signed.model_dump(mode="json")
    now = binding_digest(digests(signed))
    with pytest.raises(ConfigError, match=rf"before perfloop signed the graph's own state.*--trust {now}"):
        check("s1", values, meta, tmp_path, None)
    assert check("s1", values, meta, tmp_path, now) is True


@pytest.mark.parametrize(
    "spoil, says",
    [
        (lambda p: p.unlink(), "this machine has no key"),
        (lambda p: p.write_bytes(b""), "is empty: remove it"),
        (lambda p: p.write_bytes(b"\n  \n"), "is empty: remove it"),
        (lambda p: p.chmod(0o644), "is mode 0644, readable by others"),
        (lambda p: p.write_bytes(b"short"), "is malformed (not 64 hex digits)"),
    ],
)
def test_no_sound_key_is_never_a_match_not_even_the_empty_keys_signature(tmp_path: Path, spoil, says) -> None:
    """Fail closed: a session signed under the key it would read (the empty key, a public one)
    is "not signed by this user", and making a signature with such a key file is refused too."""
    path = tmp_path / "signing.key"
    user_key(tmp_path)
    spoil(path)
    raw = path.read_bytes().strip() if path.exists() else b""
    signed = state(tmp_path)
    meta = {SIGNATURE: seal(raw, "s1", {**digests(signed), GRAPH: "0" * 64})}  # the peer signs with it
    with pytest.raises(
        ConfigError, match=f"is not signed by this user's key .*{re.escape(says)}.*nothing was run"
    ):
        check("s1", signed.model_dump(mode="json"), meta, tmp_path, None)
    if path.exists():
        with pytest.raises(ConfigError, match=f"cannot sign this session: .*{re.escape(says)}"):
            user_key(tmp_path)
