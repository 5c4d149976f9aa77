"""The public surface of loom_client is pinned: changing it is a deliberate act."""

from __future__ import annotations

import loom_client


def test_all_is_pinned() -> None:
    """`__all__` lists exactly the public names, and each one exists."""
    expected = [
        "NO_RETRY",
        "RETRYABLE_CODES",
        "SERVICE_ATTRIBUTES",
        "CallDefaults",
        "FieldViolation",
        "InboxClient",
        "IteratorClient",
        "LoomClient",
        "LoomError",
        "Metadata",
        "RetryPolicy",
        "SummaryClient",
        "TemplatesClient",
        "ThreadWeaverClient",
        "rpc_method",
        "snake_case",
    ]
    assert expected == loom_client.__all__
    assert all(hasattr(loom_client, name) for name in expected)
