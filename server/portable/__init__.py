"""Data that outlives a machine: portable dumps, loads and migrations between engines, and
online backups of the embedded stores (`docs/operations/data.md`)."""

__all__: list[str] = []
