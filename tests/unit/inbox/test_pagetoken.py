"""Page tokens: opaque, versioned, checksummed keyset cursors."""

from __future__ import annotations

import base64

import pytest

from server.inbox import pagetoken
from server.inbox.model import InboxFilter
from server.inbox.pagetoken import Cursor


class TestRoundTrip:
    @pytest.mark.parametrize(
        "cursor",
        [
            Cursor(1, "t", InboxFilter.ALL),
            Cursor(2**63 - 1, "x" * 256, InboxFilter.UNREAD),
            Cursor(42, "ü:#/ß", InboxFilter.READ),
        ],
        ids=["small", "largest", "unicode"],
    )
    def test_decode_inverts_encode(self, cursor: Cursor) -> None:
        """What was encoded for an inbox decodes to the same cursor for that inbox."""
        token = pagetoken.encode(cursor, "inbox-1")
        assert pagetoken.decode(token, "inbox-1") == cursor

    def test_token_is_urlsafe_and_unpadded(self) -> None:
        """Tokens survive URLs and JSON untouched."""
        token = pagetoken.encode(Cursor(7, "t?&=/+", InboxFilter.ALL), "i")
        assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


class TestTamperDetection:
    def test_every_flipped_byte_is_rejected(self) -> None:
        """Changing any byte of a token makes it invalid."""
        token = pagetoken.encode(Cursor(1234, "thread", InboxFilter.UNREAD), "inbox")
        raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        for i in range(len(raw)):
            bad = bytearray(raw)
            bad[i] ^= 0x01
            forged = base64.urlsafe_b64encode(bytes(bad)).rstrip(b"=").decode()
            with pytest.raises(ValueError, match=r"page token|corrupted|version"):
                pagetoken.decode(forged, "inbox")

    def test_token_of_another_inbox_is_rejected(self) -> None:
        """A token only continues the inbox it was issued for."""
        token = pagetoken.encode(Cursor(1, "t", InboxFilter.ALL), "alice")
        with pytest.raises(ValueError, match="another inbox"):
            pagetoken.decode(token, "bob")

    @pytest.mark.parametrize(
        "token",
        ["!!!", "abc", "", "A" * 2000, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"],
        ids=["not-base64", "too-short", "empty", "too-long", "zeros"],
    )
    def test_garbage_is_rejected(self, token: str) -> None:
        """Anything that is not one of our tokens raises ValueError."""
        with pytest.raises(ValueError):  # noqa: PT011 - the reason varies by garbage
            pagetoken.decode(token, "inbox")
