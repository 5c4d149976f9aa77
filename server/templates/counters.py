"""TemplateInduction's counters (GetInductionStats): counts only, shared by the stages."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Counters"]


@dataclass
class Counters:
    """Counts only: never an email, a recipient or a text."""

    accepted: int = 0
    dropped_cpu: int = 0
    dropped_io: int = 0
    dropped_formations: int = 0
    fingerprinted: int = 0
    processed: int = 0
    skipped_full: int = 0
    formations: int = 0
    templates_formed: int = 0
    failed: int = 0
