"""Characters that a reader does not see as they are (pure): control characters and invisible
format characters, which can make a terminal or an editor show a line other than the one stored.

Two uses, one definition: the patch gate refuses a patch that adds such a character
(tools/workspace/patch_check.py), and every text perfloop prints to a terminal shows them as
escapes (`visible`, used by agent/cli/terminal.py), so a stored diff, title or name cannot move the
cursor, recolour the screen, or reorder what the reviewer reads.

Hidden: the C0 controls except tab and newline (ESC, CR, backspace, ...), DEL, the C1 controls
(U+0080-U+009F, CSI among them), Unicode category Cf (the bidi embeddings, overrides and isolates
of "Trojan Source", zero-width spaces and joiners, U+FEFF, the tag characters), and every
character with Unicode's `Default_Ignorable_Code_Point` property (issue 56: the combining grapheme
joiner, the Hangul fillers, the Khmer inherent vowels U+17B4/U+17B5, the variation selectors and
the reserved ranges a later Unicode may fill), not a list written by hand. Python's `unicodedata`
lacks that property; the `regex` package (a dependency already, kept current with Unicode) has
it as `\\p{Default_Ignorable_Code_Point}`. Two other classes are judged hidden too: characters
named a FILLER (U+16FE4 KHITAN SMALL SCRIPT FILLER, which renders as nothing and is not
default-ignorable in every Unicode version) and the Braille blank U+2800 (a blank that is not a space).
The line and paragraph separators U+2028 / U+2029 (categories Zl, Zp) are hidden too (issue 62): a
renderer that breaks the line there shows code that does not run as shown.

`look_alike` (issue 62) finds a word a reader takes for another: letters of two scripts in one
word (a Cyrillic `о` in `оs`), or a letter that NFKC folds into another (fullwidth `ｐrint`, which
Python reads as `print`); the patch gate refuses added lines with one.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

import regex  # type: ignore[import-untyped]

KEPT = frozenset("\t\n")
"""Controls that are plain text: a tab and a newline (and a CR right before a newline: a CRLF line
ending, which moves nothing on the screen)."""

IGNORABLE = regex.compile(r"\p{Default_Ignorable_Code_Point}")
"""Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt: Cf, the variation selectors
and Other_Default_Ignorable_Code_Point, less the white space and a few visible format marks)."""
BLANKS = frozenset("\u2800")
"""Blanks that are not a space: the Braille pattern blank."""


@lru_cache(maxsize=8192)
def is_hidden(ch: str) -> bool:
    """Whether the character `ch` is not shown as itself (pure)."""
    if ch in KEPT:
        return False
    code = ord(ch)
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return True
    if code < 0x7F:
        return False
    if unicodedata.category(ch) in ("Cf", "Zl", "Zp") or IGNORABLE.match(ch) or ch in BLANKS:
        return True
    return "FILLER" in unicodedata.name(ch, "")


def describe(ch: str) -> str:
    """`U+202E RIGHT-TO-LEFT OVERRIDE`, `U+001B (a control character)` (pure)."""
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X} " + (name or "(a control character)")


def _hidden_at(text: str, i: int) -> bool:
    ch = text[i]
    return is_hidden(ch) and not (ch == "\r" and text[i + 1 : i + 2] in ("\n", ""))


def first_hidden(text: str) -> int | None:
    """The index of the first hidden character in `text` (a CR ending the text or a line is not),
    or None (pure)."""
    return next((i for i in range(len(text)) if _hidden_at(text, i)), None)


def escape(ch: str) -> str:
    """How a hidden character is shown: `\\x1b`, `\\u202e` (pure)."""
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every hidden character shown as its escape (pure); a text without one is
    returned as it is."""
    if first_hidden(text) is None:
        return text
    return "".join(escape(ch) if _hidden_at(text, i) else ch for i, ch in enumerate(text))


_WORD = regex.compile(r"[\p{L}\p{M}\p{N}_]+")


def _script(ch: str) -> str:
    return "LATIN" if ch.isascii() else unicodedata.name(ch, "?").split(" ")[0]


def look_alike(text: str) -> str | None:
    """The first word of `text` a reader takes for another (mixed scripts, or a letter NFKC folds:
    fullwidth, ligatures, mathematical letters), described, or None (pure)."""
    for m in _WORD.finditer(text):
        word = m.group()
        if word.isascii():
            continue
        folded = next((ch for ch in word if unicodedata.normalize("NFKC", ch) != ch), None)
        if folded is not None:
            return f"the word {visible(word)!r} holds {describe(folded)}, read as {unicodedata.normalize('NFKC', folded)!r}"
        scripts = sorted({_script(ch) for ch in word if ch.isalpha()})
        if len(scripts) > 1:
            return f"the word {visible(word)!r} mixes {' and '.join(scripts)} letters"
    return None
