"""Finding a SEARCH part in a file the way the best editors do: exactly first, then tolerating
what models get wrong when they copy code (pure).

In order: the exact text; the text without line numbers copied from `read_file` (`N<TAB>`); the
lines with trailing whitespace ignored; the lines with their indentation shifted by one constant
prefix (the replacement is then shifted alike). Each stage must find exactly one place; more than
one is ambiguous and is reported, never guessed.
"""

from __future__ import annotations

import re

_NUMBERED = re.compile(r"^\s*\d+\t")


def without_line_numbers(search: str) -> str:
    """`search` without `N<TAB>` prefixes, when every non-blank line has one (pure)."""
    lines = search.splitlines(keepends=True)
    if lines and all(_NUMBERED.match(ln) for ln in lines if ln.strip()):
        return "".join(_NUMBERED.sub("", ln, count=1) for ln in lines)
    return search


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _shift(file_lines: list[str], want: list[str]) -> tuple[str, str] | None:
    """(added, removed) indentation turning `want` into `file_lines` line by line, the same for
    every non-blank line; None when the lines differ otherwise."""
    shift: tuple[str, str] | None = None
    for f, w in zip(file_lines, want, strict=True):
        if not f.strip() and not w.strip():
            continue
        if f.strip() != w.strip():
            return None
        fi, wi = _indent(f), _indent(w.rstrip("\r\n"))
        if fi.endswith(wi):
            this = (fi[: len(fi) - len(wi)], "")
        elif wi.endswith(fi):
            this = ("", wi[: len(wi) - len(fi)])
        else:
            return None
        if shift is not None and this != shift:
            return None
        shift = this
    return shift or ("", "")


def _reindent(text: str, added: str, removed: str) -> str:
    out = []
    for ln in text.splitlines(keepends=True):
        if ln.strip():
            ln = added + (ln[len(removed) :] if removed and ln.startswith(removed) else ln)
        out.append(ln)
    return "".join(out)


def replace_once(current: str, search: str, replace: str) -> tuple[str | None, int, str]:
    """(the new text, 1, how it matched) when `search` is found exactly once by the first stage
    that finds it at all; (None, count, stage) otherwise (count 0: nowhere) (pure)."""
    count = current.count(search) if search else 0
    if count:
        return (current.replace(search, replace, 1) if count == 1 else None), count, "exact"
    plain = without_line_numbers(search)
    if plain != search and (count := current.count(plain)):
        return (current.replace(plain, replace, 1) if count == 1 else None), count, "without line numbers"
    lines, want = current.splitlines(keepends=True), plain.splitlines(keepends=True)
    if not want:
        return None, 0, "exact"
    for stage in ("trailing whitespace ignored", "indentation shifted"):
        hits = []
        for k in range(len(lines) - len(want) + 1):
            window = lines[k : k + len(want)]
            if stage.startswith("trailing"):
                if all(a.rstrip() == b.rstrip() for a, b in zip(window, want, strict=True)):
                    hits.append((k, ("", "")))
            elif (shift := _shift(window, want)) is not None:
                hits.append((k, shift))
        if len(hits) == 1:
            k, (added, removed) = hits[0]
            new = _reindent(replace, added, removed)
            if new and not new.endswith("\n") and k + len(want) < len(lines):
                new += "\n"
            return "".join(lines[:k]) + new + "".join(lines[k + len(want) :]), 1, stage
        if hits:
            return None, len(hits), stage
    return None, 0, "exact"
