"""Which launch flags may be changed, and by whom (pure): the allowlist every edit of a launch
command is checked against (docs/SECURITY.md, "launch flags").

A model's `LAUNCH:` answer may set or drop only a flag its engine lists as changeable (the engine
contract, tools/engines/contract.py: `changeable_flags`, `fixed_flags`, `normalise_flag`) or one the
target file adds (`[proposer] launch_flags`), spelled out in full as `--flag VALUE`:
engines parse their flags with argparse, which takes any unique prefix (`--hos` for `--host`) and
`--flag=VALUE`, so a prefix, an `=` spelling or a value starting with `-` (read as another flag)
could reach a flag the check never saw. `FIXED` flags (where the server listens, what model and
code it loads) are never changed, by a model, a playbook or a search, whatever the target file
lists.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tools.engines.registry import engine

FIXED = (
    "--host",
    "--port",
    "--model",
    "--model-path",
    "--model-name",
    "--served-model-name",
    "--tokenizer",
    "--tokenizer-path",
    "--tokenizer-mode",
    "--trust-remote-code",
    "--revision",
    "--code-revision",
    "--tokenizer-revision",
    "--download-dir",
    "--load-format",
    "--config",
    "--api-key",
    "--ssl-keyfile",
    "--ssl-certfile",
    "--allowed-origins",
    "--chat-template",
    "--tp-rank",
    # vLLM's: another listening socket or path prefix, and what code or config it loads
    "--uds",
    "--root-path",
    "--worker-cls",
    "--worker-extension-cls",
    "--scheduler-cls",
    "--middleware",
    "--tool-parser-plugin",
    "--logits-processors",
    "--hf-overrides",
    "--hf-config-path",
    "--model-loader-extra-config",
    "--allowed-local-media-path",
    "--profiler-config",
    # what loads code, plugins or files, or sends data out (vLLM's and SGLang's families)
    "--kv-transfer-config",
    "--kv-events-config",
    "--ec-transfer-config",
    "--reasoning-parser-plugin",
    "--log-config-file",
    "--otlp-traces-endpoint",
    "--collect-detailed-traces",
    "--lora-modules",
    "--lora-paths",
    "--enable-lora",
    "--speculative-config",
    "--speculative-draft-model-path",
    "--speculative-draft-model-revision",
    "--generation-config",
    "--override-generation-config",
    "--additional-config",
    "--compilation-config",
    "--json-model-override-args",
    "--custom-weight-loader",
    "--enable-custom-logit-processor",
    "--tool-server",
    "--preferred-sampling-params",
    "--crash-dump-folder",
    "--response-role",
)
"""Where the server listens, what model, tokenizer, code and credentials it loads: no edit ever
changes them (nor a prefix of them)."""

_FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_.-]*")


def normal(flag: str) -> str:
    """`flag` as the engine reads it (pure): vLLM's parser turns `_` into `-` in a flag's name
    (`--trust_remote_code` is `--trust-remote-code`); every check reads this spelling."""
    name, eq, value = flag.partition("=")
    return name.replace("_", "-") + eq + value


def fixed_problem(flag: str) -> str | None:
    """Why no edit may touch `flag`: it is a fixed flag, or a prefix of one that argparse would
    read as it (`--hos` for `--host`), spelled with `-` or `_`; None when it is not (pure)."""
    spelled, flag = flag, normal(flag)
    if spelled != flag:
        return f"{spelled} is read by the engine as {flag}; " + (
            fixed_problem(flag) or "spell flags with `-`"
        )
    if flag in FIXED:
        return f"{flag} is fixed (where the server listens, what model and code it loads): never changed"
    prefixed = [f for f in FIXED if f.startswith(flag)]
    if prefixed:
        return f"{flag} is a prefix of {prefixed[0]}, which argparse would read it as; spell flags in full"
    return None


def not_fixed(flag: str) -> str:
    """`flag`, or ValueError when it is fixed (a validator of the flags playbooks edit)."""
    if problem := fixed_problem(flag):
        raise ValueError(problem)
    return flag


def changeable(kind: str, extra: Sequence[str] = ()) -> list[str]:
    """The flags a model may change for a target of `kind`, with the target file's `extra` ones
    (fixed flags and their prefixes left out) (pure)."""
    eng = engine(kind)
    own = [*eng.changeable_flags, *extra]
    return [f for f in dict.fromkeys(own) if fixed_problem(f) is None and f not in eng.fixed_flags]


def flag_problem(kind: str, flag: str, value: str | None, extra: Sequence[str] = ()) -> str | None:
    """Why a model may not set `flag` (to `value`; None: drop it, or a bare flag) on a target of
    `kind`, or None (pure)."""
    if "=" in flag:
        return f"write `{flag.split('=')[0]} VALUE`, not `{flag}`: one flag, then its value"
    if not _FLAG.fullmatch(flag):
        return f"{flag!r} is not a flag: name one flag starting with `--`"
    if problem := fixed_problem(flag):
        return problem
    eng = engine(kind)
    if (read := eng.normalise_flag(flag)) != flag:
        return f"{flag} is read by the {kind} engine as {read}; spell it so"
    if flag in eng.fixed_flags:
        return f"{flag} is fixed for a {kind} target (what it serves or where): never changed"
    allowed = changeable(kind, extra)
    if flag not in allowed:
        longer = [f for f in allowed if f.startswith(flag)]
        if longer:
            return f"{flag} is a prefix of {longer[0]}; spell flags in full"
        return (
            f"{flag} is not a launch option you may change for a {kind} target (those are: "
            f"{', '.join(allowed) or 'none'}; the target file's `[proposer] launch_flags` adds to them)"
        )
    if value is not None and value.startswith("-"):
        return f"the value {value!r} of {flag} starts with `-`, which the server would read as a flag"
    return None
