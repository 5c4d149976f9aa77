"""Hypothesis strategies for ThreadWeaver's gids and thread ids, as the contract allows them.

Valid means what `server/runtime/validation.py` accepts: non-empty, at most 512 bytes of
UTF-8, no NUL. The draws lean hard on the characters an id encoding could trip over (the
old separator ``:``, the new ``/``, the escape ``%`` and ready-made escapes like ``%3A``),
since provider-prefixed ids (``google:123``) are real and any of these may appear.
"""

from __future__ import annotations

from hypothesis import strategies as st

from server.threadweaver.model import MAX_ID_BYTES

__all__ = ["valid_ids"]

_TRICKY = st.sampled_from([":", "/", "%", "%3A", "%2F", "%25", "%3a", "::", "a", "7", "é", " "])
_ANY = st.characters(codec="utf-8", exclude_characters="\x00")


def _fits(value: str, max_bytes: int) -> bool:
    return 0 < len(value.encode()) <= max_bytes


def valid_ids(max_bytes: int = MAX_ID_BYTES) -> st.SearchStrategy[str]:
    """Ids of 1..`max_bytes` UTF-8 bytes, mostly short and full of separators, sometimes
    one character repeated up to the byte limit."""
    short = st.lists(st.one_of(_TRICKY, _ANY), min_size=1, max_size=16).map("".join)
    long = st.builds(
        lambda c, n: c * n, st.sampled_from([":", "/", "%", "é", "x"]), st.integers(1, max_bytes)
    )
    return st.one_of(short, short, short, long).filter(lambda v: _fits(v, max_bytes))
