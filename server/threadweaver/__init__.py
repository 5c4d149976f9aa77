"""ThreadWeaver: write-time unification of mailbox threads into unified threads by
Message-ID (Streak's threadweaver)."""

__all__: list[str] = []
