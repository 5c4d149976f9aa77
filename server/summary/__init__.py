"""Summary: per-message delivery summaries, exact recipient sets up to a bound, then a
mergeable CPC sketch (Remind's message summaries)."""

__all__: list[str] = []
