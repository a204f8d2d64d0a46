"""Text cut to fit where a person reads it (a graph node's title, a step in a list or a message).
Plain ``str`` work, no imports: every room can use it without loading anything."""

from __future__ import annotations


def shorten(text: str, limit: int) -> str:
    """``text`` cut in the middle to at most ``limit`` characters (its start and its end kept, an
    ellipsis between: both ends of a name tell names apart)."""
    if len(text) <= limit:
        return text
    keep = limit - 1
    return text[: keep - keep // 2] + "…" + text[len(text) - keep // 2:]


__all__ = ["shorten"]
