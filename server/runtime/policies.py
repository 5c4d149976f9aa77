"""Per-method bulkheads and deadlines, built from each service's defaults and the settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from server.runtime.bulkhead import Bulkhead

__all__ = ["MethodPolicy", "PolicyTable"]


@dataclass(frozen=True, slots=True)
class MethodPolicy:
    """How one RPC method is bounded."""

    max_concurrency: int = 64
    """Calls of this method running at once."""
    max_waiting: int = 64
    """Calls allowed to wait for a slot; beyond that RESOURCE_EXHAUSTED at once."""
    max_wait_s: float = 0.5
    """Longest wait for a slot before RESOURCE_EXHAUSTED."""
    deadline_s: float = 5.0
    """Default deadline; a shorter client deadline wins."""
    scope: str = ""
    """Token scope the method requires when auth is on (empty: derived from its name,
    `server.runtime.auth.method_scope`)."""


class PolicyTable:
    """Resolves a full method name to its policy and its own bulkhead.

    Services declare defaults next to their handlers (a batch write deserves a longer
    deadline than a point read); operators override any method in the TOML settings.
    """

    __slots__ = ("_bulkheads", "_defaults", "_fallback", "_overrides")

    def __init__(
        self,
        defaults: Mapping[str, MethodPolicy],
        overrides: Mapping[str, MethodPolicy] | None = None,
        fallback: MethodPolicy | None = None,
    ) -> None:
        self._defaults = dict(defaults)
        unknown = set(overrides or {}) - set(self._defaults)
        if unknown:
            raise ValueError(f"policies for unknown methods: {sorted(unknown)}")
        # An override that names no scope keeps the method's own.
        self._overrides = {
            method: p if p.scope else replace(p, scope=self._defaults[method].scope)
            for method, p in (overrides or {}).items()
        }
        self._fallback = fallback or MethodPolicy()
        self._bulkheads: dict[str, Bulkhead] = {}

    def policy(self, method: str) -> MethodPolicy:
        """The policy of `method` (``loom.v1.Service/Method``)."""
        return self._overrides.get(method) or self._defaults.get(method) or self._fallback

    def bulkheads(self) -> list[Bulkhead]:
        """Every bulkhead created so far (one per method that has been called)."""
        return list(self._bulkheads.values())

    def bulkhead(self, method: str) -> Bulkhead:
        """The bulkhead of `method`, created on first use (inside the running loop)."""
        found = self._bulkheads.get(method)
        if found is None:
            p = self.policy(method)
            found = Bulkhead(
                method,
                max_concurrency=p.max_concurrency,
                max_waiting=p.max_waiting,
                max_wait_s=p.max_wait_s,
            )
            self._bulkheads[method] = found
        return found
