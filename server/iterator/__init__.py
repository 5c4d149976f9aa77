"""Iterator: a pipeline of stateless workers iterating a relational hierarchy by keyset
ranges over at-least-once queues (Box's iteration of relational databases)."""

__all__: list[str] = []
