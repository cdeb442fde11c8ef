"""SEARCH/REPLACE edit blocks: parse a model's answer, apply blocks in memory, build the unified diff.

The format (aider's, which models write most reliably; optionally inside a fenced code block):

    path/relative/to/repo.py
    <<<<<<< SEARCH
    exact existing lines
    =======
    replacement lines
    >>>>>>> REPLACE

Everything here is pure: texts in, texts out; errors are `EditError` with a reason for the model.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from agent.proposer.edits.matching import replace_once

SEARCH, DIVIDER, REPLACE = "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE"
_FENCE = re.compile(r"^\s*(```|~~~)")
_MARKERS = re.compile(r"^(<{5,9} SEARCH|={5,9}|>{5,9} REPLACE)\s*$")


class EditError(Exception):
    """An answer's edits cannot be used; str() is the reason, written for the model."""


@dataclass(frozen=True)
class Block:
    """One edit: replace `search` (exact, must occur once) by `replace` in `path`."""

    path: str
    search: str
    replace: str
    index: int
    """1-based position of the block in the answer."""

    def show(self) -> str:
        """The block as the model wrote it (for error messages)."""
        return f"{self.path}\n{SEARCH}\n{self.search}{DIVIDER}\n{self.replace}{REPLACE}"


def normal_path(path: str) -> str:
    """A path as the model may write it, made repo-relative and POSIX: `./a/b.py`, `a\\b.py`,
    `a//b.py` -> `a/b.py` (pure; absolute and `..` paths are left for the path check to refuse)."""
    path = re.sub(r"/{2,}", "/", path.replace("\\", "/"))
    while path.startswith("./"):
        path = path[2:]
    return path


def _path_before(lines: list[str], i: int) -> tuple[str, int] | None:
    """The file path line above line i (fence lines and blank lines skipped), and its index."""
    for j in range(i - 1, max(i - 4, -1), -1):
        line = lines[j].strip()
        if not line or _FENCE.match(line):
            continue
        path = line.strip("`*:# ").removeprefix("File").strip("`*: ")
        return (normal_path(path), j) if path and " " not in path and not _MARKERS.match(line) else None
    return None


def parse(answer: str) -> tuple[list[Block], str]:
    """The edit blocks in an answer, and the rest of its text (the rationale)."""
    lines = answer.splitlines(keepends=True)
    blocks: list[Block] = []
    used: set[int] = set()
    i = 0
    while i < len(lines):
        if lines[i].strip() != SEARCH:
            if _MARKERS.match(lines[i].strip()) and lines[i].strip().startswith(("<", ">")):
                raise EditError(
                    f"line {i + 1}: `{lines[i].strip()}` is not a well-formed marker; write exactly "
                    f"`{SEARCH}`, `{DIVIDER}` and `{REPLACE}` on lines of their own"
                )
            i += 1
            continue
        n = len(blocks) + 1
        found = _path_before(lines, i)
        if found is None:
            raise EditError(f"edit block {n}: put the file's repo-relative path on the line above `{SEARCH}`")
        path, path_line = found
        try:
            mid = next(k for k in range(i + 1, len(lines)) if lines[k].rstrip("\r\n") == DIVIDER)
            end = next(k for k in range(mid + 1, len(lines)) if lines[k].strip() == REPLACE)
        except StopIteration:
            bad = next((k for k in range(i + 1, len(lines)) if re.fullmatch(r"\s*={5,9}\s*", lines[k])), None)
            if bad is not None and not any(
                lines[k].rstrip("\r\n") == DIVIDER for k in range(i + 1, len(lines))
            ):
                raise EditError(
                    f"edit block {n} ({path}): line {bad + 1} `{lines[bad].strip()}` is not a well-formed "
                    f"divider; write exactly `{DIVIDER}` (seven `=`, nothing else on the line)"
                ) from None
            raise EditError(
                f"edit block {n} ({path}): `{SEARCH}` needs a `{DIVIDER}` line and then a `{REPLACE}` line"
            ) from None
        if any(lines[k].strip() == SEARCH for k in range(i + 1, end)):
            raise EditError(f"edit block {n} ({path}): a new `{SEARCH}` starts before `{REPLACE}`")
        blocks.append(Block(path, "".join(lines[i + 1 : mid]), "".join(lines[mid + 1 : end]), n))
        used.update(range(path_line, end + 1))
        i = end + 1
    if not blocks:
        raise EditError(
            f"no edit blocks found: end with one or more blocks (file path, `{SEARCH}`, exact lines, "
            f"`{DIVIDER}`, new lines, `{REPLACE}`)"
        )
    rest = [line for k, line in enumerate(lines) if k not in used and not _FENCE.match(line)]
    return blocks, "".join(rest).strip()


def closest(text: str, search: str, context: int = 2) -> str:
    """The lines of `text` most like `search`, with a little context, numbered (pure)."""
    lines, want = text.splitlines(), search.splitlines()
    if not lines or not want:
        return "(the file is empty)" if not lines else "(the SEARCH part is empty)"
    size = len(want)
    best, at = -1.0, 0
    for k in range(0, max(len(lines) - size + 1, 1)):
        score = difflib.SequenceMatcher(None, "\n".join(lines[k : k + size]), "\n".join(want)).ratio()
        if score > best:
            best, at = score, k
    lo, hi = max(at - context, 0), min(at + size + context, len(lines))
    return "\n".join(f"{n + 1}\t{lines[n]}" for n in range(lo, hi))


def apply_blocks(blocks: list[Block], texts: dict[str, str | None]) -> dict[str, str]:
    """The new text of every file the blocks touch; EditError naming each block that fails."""
    new: dict[str, str] = {}
    problems = []
    for b in blocks:
        current = new.get(b.path, texts.get(b.path))
        if current is None:
            if b.search.strip():
                problems.append(
                    f"block {b.index}: {b.path} does not exist (to create it, leave SEARCH empty)"
                )
            else:
                new[b.path] = b.replace
            continue
        done, count, how = replace_once(current, b.search, b.replace) if b.search else (None, 0, "exact")
        if done is not None:
            new[b.path] = done
        elif count == 0:
            why = "is empty, but the file exists" if not b.search else "does not match the file exactly"
            problems.append(
                f"block {b.index}: the SEARCH part {why}. Your block:\n{b.show()}\n"
                f"The closest lines of {b.path} (numbered; numbers are not part of the file):\n"
                f"{closest(current, b.search)}"
            )
        else:
            problems.append(
                f"block {b.index}: the SEARCH part matches {count} places in {b.path}"
                + ("" if how == "exact" else f" ({how})")
                + "; add surrounding lines so it matches exactly one"
            )
    if problems:
        raise EditError("\n\n".join(problems))
    return new


def unified_diff(old: dict[str, str | None], new: dict[str, str]) -> str:
    """A git-style unified diff (a/ b/ prefixes) from old to new texts (pure)."""
    parts = []
    for path in sorted(new):
        before, after = old.get(path), new[path]
        if before == after:
            continue
        a = (before or "").splitlines(keepends=True)
        b = after.splitlines(keepends=True)
        head = f"diff --git a/{path} b/{path}\n" + ("new file mode 100644\n" if before is None else "")
        body = difflib.unified_diff(
            a, b, fromfile="/dev/null" if before is None else f"a/{path}", tofile=f"b/{path}", n=3
        )
        text = "".join(
            line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in body
        )
        parts.append(head + text)
    return "".join(parts)
