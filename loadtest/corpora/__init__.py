"""The inputs of workloads and tests: generated corpora with their ground truth, and real
ones (mailing lists, email templates, Chinook) fetched pinned and never committed."""

__all__: list[str] = []
