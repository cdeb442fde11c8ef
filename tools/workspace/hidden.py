"""Characters that a reader does not see as they are (pure): control characters and invisible
format characters, which can make a terminal or an editor show a line other than the one stored.

Two uses, one definition: the patch gate refuses a patch that adds such a character
(tools/workspace/patch_check.py), and every text perfloop prints to a terminal shows them as
escapes (`visible`, used by agent/cli/terminal.py), so a stored diff, title or name cannot move the
cursor, recolour the screen, or reorder what the reviewer reads.

Hidden: the C0 controls except tab and newline (ESC, CR, backspace, ...), DEL, the C1 controls
(U+0080-U+009F, CSI among them), and Unicode category Cf: the bidi embeddings, overrides and
isolates (U+202A-U+202E, U+2066-U+2069, "Trojan Source"), zero-width spaces and joiners
(U+200B-U+200F), the invisible operators U+2060-U+2064, U+FEFF and the tag characters; and the
characters of other categories that render as nothing or as a blank that is not a space
(`INVISIBLE`): the Hangul fillers, the combining grapheme joiner, the variation selectors, the
Mongolian free variation selectors and the Braille blank.
"""

from __future__ import annotations

import unicodedata

KEPT = frozenset("\t\n")
"""Controls that are plain text: a tab and a newline (and a CR right before a newline: a CRLF line
ending, which moves nothing on the screen)."""


INVISIBLE = (
    (0x034F, 0x034F),  # COMBINING GRAPHEME JOINER (Mn)
    (0x115F, 0x1160),  # HANGUL CHOSEONG / JUNGSEONG FILLER (Lo)
    (0x180B, 0x180F),  # MONGOLIAN FREE VARIATION SELECTORS (Mn; U+180E is Cf)
    (0x2800, 0x2800),  # BRAILLE PATTERN BLANK (So)
    (0x3164, 0x3164),  # HANGUL FILLER (Lo)
    (0xFE00, 0xFE0F),  # VARIATION SELECTOR-1..16 (Mn)
    (0xFFA0, 0xFFA0),  # HALFWIDTH HANGUL FILLER (Lo)
    (0xE0100, 0xE01EF),  # VARIATION SELECTOR-17..256 (Mn)
)
"""Code point ranges outside category Cf that render invisibly (tested one by one)."""


def is_hidden(ch: str) -> bool:
    """Whether the character `ch` is not shown as itself (pure)."""
    if ch in KEPT:
        return False
    code = ord(ch)
    if code < 0x20 or 0x7F <= code <= 0x9F or unicodedata.category(ch) == "Cf":
        return True
    return any(lo <= code <= hi for lo, hi in INVISIBLE)


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
