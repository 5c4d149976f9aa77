"""Inbox: fan-out on write of (inbox, thread) rows with a materialized unread count,
bulkheads and probabilistic trimming (Yammer's inbox)."""

__all__: list[str] = []
