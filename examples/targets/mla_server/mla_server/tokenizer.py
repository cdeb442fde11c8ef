"""Byte-level tokenizer and chat template.

Token ids are bytes (vocab 256). Generation is restricted to printable ASCII, so every generated
token decodes to exactly one character and text equality is token equality.
"""

VOCAB_SIZE = 256
PRINTABLE_FIRST = 32
PRINTABLE_LAST = 126


def encode(text: str) -> list[int]:
    """UTF-8 bytes of the text."""
    return list(text.encode("utf-8"))


def decode(ids: list[int]) -> str:
    """Text of byte ids (invalid UTF-8 is replaced)."""
    return bytes(ids).decode("utf-8", errors="replace")


def apply_chat_template(messages: list[dict]) -> str:
    """Render `[{"role", "content"}]` as a prompt ending with the assistant turn."""
    parts = [f"<|{m['role']}|>\n{m['content']}\n" for m in messages]
    return "".join(parts) + "<|assistant|>\n"
