"""Which of a playbook's patches a target gets: the one place that chooses (`choose_patch`).

A playbook's `[patches]` table maps a target kind to a patch file relative to its folder, e.g.
`mla_server = "patches/mla_server.diff"`. SGLang patches are keyed by release: `"sglang@X.Y.Z"` is
the patch from release X.Y.Z on, until the next key; a plain `sglang` is the newest, used when the
checkout's release is not known. SGLang patches are written against the upstream layout
(`python/sglang/...`) and rebased onto the checkout's package folder. The loop's propose step and
`perfloop playbook apply` both call `choose_patch`; applying is the tools' job.

A release may have variants, `"sglang@X.Y.Z+name"`, and `[patch_paths]` says which paths
(`eager-decode`, `graph-decode`, `extend`) each patch changes: the diagnosis (`with_patch`) names
the patch that covers the path a trace shows (`covering`: the plain one first), or why none does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from playbooks.schema import Playbook
from state.engines.sglang import SglangLayout
from state.profiling.diagnosis import DiagnosisContext, Finding
from tools.errors import ConfigError
from tools.sglang.layout import parse_version

UPSTREAM_PACKAGE_DIR = "python/sglang"
"""Package folder the catalog's SGLang patches are written against."""

_KEY = re.compile(r"^sglang@(\d+)\.(\d+)\.(\d+)$")
PATHS = ["eager-decode", "graph-decode", "extend"]
"""The paths a patch may cover; a key `[patch_paths]` does not list covers them all."""


class NoPatch(ConfigError):
    """The playbook has no patch for this target: none for its kind, or (SGLang) none for its release."""

    def __init__(self, playbook_id: str, reason: str) -> None:
        super().__init__(f"playbook {playbook_id}: {reason}")
        self.reason = reason
        """Why, without the playbook's id, e.g. `no patch for kind mla_server`."""


class ChosenPatch(NamedTuple):
    """A playbook's patch for one target."""

    key: str
    """The `[patches]` key chosen, e.g. `mla_server` or `sglang@0.5.22`."""
    diff: str
    """The patch text, rebased onto the target's layout."""


def choose_patch(playbook: Playbook, kind: str, sglang: SglangLayout | None = None) -> ChosenPatch:
    """The playbook's patch for a target of `kind`; for SGLang with a known layout, its release's.

    Raises NoPatch when the playbook has none for this kind (or release), ConfigError when the
    patch file it names cannot be read.
    """
    if kind == "sglang" and sglang is not None:
        if not any(k == kind or k.startswith(kind + "@") for k in playbook.patches):
            raise NoPatch(playbook.id, f"no patch for kind {kind}")
        try:
            key = release_key(playbook.patches, parse_version(sglang.version))
        except ConfigError as err:
            raise NoPatch(playbook.id, str(err)) from err
        return ChosenPatch(key, rebase_diff(read_patch(playbook, key), sglang.package_dir))
    if kind not in playbook.patches:
        raise NoPatch(playbook.id, f"no patch for kind {kind}")
    return ChosenPatch(kind, read_patch(playbook, kind))


def read_patch(playbook: Playbook, key: str) -> str:
    """The text of the patch file `[patches]` names under `key`; ConfigError naming the file if unreadable."""
    path = Path(playbook.source_dir) / playbook.patches[key]
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(
            f"playbook {playbook.id}: patch for {key!r} at {path} cannot be read "
            f"({err.strerror}); add the file or remove it from [patches]"
        ) from err


def release_key(patches: dict[str, str], version: tuple[int, int, int]) -> str:
    """The `sglang@X.Y.Z` key with the greatest X.Y.Z not above `version` (pure)."""
    keyed = sorted((tuple(map(int, m.groups())), key) for key in patches if (m := _KEY.match(key)))
    fitting = [key for since, key in keyed if since <= version]
    if not fitting:
        oldest = keyed[0][1].split("@")[1] if keyed else None
        raise ConfigError(
            f"no sglang patch for {'.'.join(map(str, version))}"
            + (f" (the oldest starts at {oldest})" if oldest else " (no sglang@X.Y.Z keys)")
        )
    return fitting[-1]


def rebase_diff(diff: str, package_dir: str) -> str:
    """The diff with `python/sglang/` paths moved to `package_dir/` (pure; identity for a checkout)."""
    if package_dir == UPSTREAM_PACKAGE_DIR:
        return diff
    pattern = re.compile(
        rf"^(diff --git a/|--- a/|\+\+\+ b/)({re.escape(UPSTREAM_PACKAGE_DIR)}/)"
        rf"|( b/){re.escape(UPSTREAM_PACKAGE_DIR)}/",
        re.M,
    )
    return pattern.sub(lambda m: (m[1] or m[3]) + package_dir + "/", diff)


def covering(playbook: Playbook, kind: str, path: str, version: str | None) -> tuple[str | None, str]:
    """The `[patches]` key whose patch covers `path` on a target of `kind` (SGLang: of this release,
    or the newest keyed one when None; its plain key first, then its `+name` variants), with one
    line saying so; (None, why) when none does (pure: reads no patch file)."""

    def paths(key: str) -> list[str]:
        return list(playbook.patch_paths.get(key, PATHS))

    keyed = sorted((int(m[1]), int(m[2]), int(m[3])) for k in playbook.patches if (m := _KEY.match(k)))
    if kind != "sglang" or not keyed:
        if kind not in playbook.patches:
            return None, f"no patch for kind {kind}"
        if path in paths(kind):
            return kind, f"{kind} ({playbook.patches[kind]}) covers {path}"
        return None, f"the {kind} patch covers {', '.join(paths(kind))}, not {path}"
    try:
        release = parse_version(version) if version else keyed[-1]
        base = release_key(playbook.patches, release)
    except ConfigError as err:
        return None, str(err)
    shown = version or f"{base.split('@')[1]} and later (no release given)"
    candidates = [base, *sorted(k for k in playbook.patches if k.startswith(base + "+"))]
    for key in candidates:
        if path in paths(key):
            return key, f"{key} ({playbook.patches[key]}) covers {path} on sglang {shown}"
    have = "; ".join(f"{k} covers {', '.join(paths(k))}" for k in candidates)
    return None, f"no patch for sglang {shown} covers {path} ({have})"


def with_patch(finding: Finding, playbook: Playbook, ctx: DiagnosisContext) -> Finding:
    """The finding with the patch covering its decode path on the target (where the playbook says
    which paths its patches cover)."""
    if not playbook.patch_paths or finding.decode_path is None:
        return finding
    key, note = covering(playbook, ctx.target_kind, finding.decode_path, ctx.sglang_version)
    return finding.model_copy(update={"patch": key, "patch_note": note})
