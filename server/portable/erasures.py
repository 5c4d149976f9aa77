"""Re-applying the erasure log after `loom restore` and `loom load`.

A backup or a dump taken before an erasure still holds the erased subject. Once its stores
are back, each service's store is scanned for the subjects it holds (`ServiceData.subjects`),
each is hashed with the deployment's erasure key, and those the log names are erased again
through the service's own erasure (`ServiceData.erase`), which returns once nothing of them
is left. The log never holds an id, so a subject can only be found this way: by being in the
restored data, which is exactly when it must go.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from server import registry
from server.config import Settings
from server.runtime.erasures import ErasureRecorder, SubjectHasher, key_path, log_path
from storage import factory

__all__ = ["NoErasureLog", "Reapplied", "log_files", "open_log", "reapply"]


class NoErasureLog(ValueError):
    """The erasure log or its key named for a restore or a load does not exist."""


_BATCH = 1000
"""Subjects hashed per round: memory stays bounded however many the store holds."""


@dataclass(frozen=True, slots=True)
class Reapplied:
    """One service's store checked against the log."""

    service: str
    logged: int
    """Subjects the log names for this service."""
    erased: int
    """Of those, found in the store and erased again."""

    def line(self) -> str:
        """What `loom restore` / `loom load` print."""
        if not self.logged:
            return f"erasure log: nothing erased from {self.service}"
        return (
            f"erasure log: {self.service}: {self.erased} of the {self.logged} erased subject(s) "
            "were back and are erased again"
        )


def log_files(settings: Settings, log: Path | None, key: Path | None) -> tuple[Path, Path]:
    """The erasure log and key to use: `log` (else the settings'), and `key` (else the
    settings', else ``erasure.key`` beside the log)."""
    path = log or log_path(settings.erasure, settings.sqlite)
    if key is not None:
        return path, key
    if settings.erasure.key_file:
        return path, key_path(settings.erasure, settings.sqlite)
    return path, path.with_name("erasure.key")


def _existing_hasher(path: Path, key_file: Path) -> SubjectHasher:
    """The key of the log at `path`. Never creates either: an empty log in their place
    would re-apply nothing and bring the erased back."""
    if not path.exists():
        raise NoErasureLog(
            f"no erasure log at {path}: pass --erasure-log with the deployment's log "
            "(erasures.sqlite3 in its data directory unless `erasure.log_file` says otherwise)"
        )
    if not key_file.exists():
        raise NoErasureLog(f"no erasure key at {key_file}: pass --erasure-key")
    return SubjectHasher(key_file.read_bytes())


async def open_log(path: Path, key_file: Path, settings: Settings) -> ErasureRecorder:
    """The erasure log at `path`, hashed with the key in `key_file`; both must exist."""
    hasher = _existing_hasher(path, key_file)
    return ErasureRecorder(await factory.open_erasure_log(path, settings.sqlite), hasher)


async def reapply(service: str, settings: Settings, recorder: ErasureRecorder) -> Reapplied:
    """Erases again, from `service`'s store as `settings` configure it, every subject the log
    names that the store holds."""
    logged = await recorder.log.subjects(service)
    if not logged:
        return Reapplied(service, 0, 0)
    data = await registry.by_name(service).data.open(settings)
    try:
        found: set[str] = set()
        batch: list[str] = []
        async for subject in data.subjects():
            batch.append(subject)
            if len(batch) >= _BATCH:
                found.update(s for s in batch if recorder.hasher.digest(service, s) in logged)
                batch.clear()
        found.update(s for s in batch if recorder.hasher.digest(service, s) in logged)
        if found:
            await data.erase(sorted(found))
    finally:
        await data.close()
    return Reapplied(service, len(logged), len(found))
