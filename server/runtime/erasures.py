"""Recording subject erasures: the keyed hash of each erased subject, in the erasure log.

The services' subject-level erasures (`UnweaveMailbox`, `DeleteInbox`, the two
`EraseRecipients`) and `Iterator.DeleteJob` record here *before* they erase, so an erasure
interrupted half way is still in the log and `loom restore` / `loom load` finish it. Only an
HMAC-SHA256 of ``service NUL subject`` under a key that never enters the log is kept: the
log names no one, and a guessed id cannot be checked against it without the key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable
from pathlib import Path

from storage.clock import now_ms
from storage.factory import open_erasure_log
from storage.ports import Erasure, ErasureLog
from storage.settings import ErasureSettings, SqliteSettings

__all__ = ["ErasureRecorder", "SubjectHasher", "log_path", "open_recorder"]

_KEY_BYTES = 32


class SubjectHasher:
    """HMAC-SHA256 of a subject id under the deployment's erasure key."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if len(key) < _KEY_BYTES:
            raise ValueError(f"the erasure key must be {_KEY_BYTES} bytes or more")
        self._key = key

    def digest(self, service: str, subject: str) -> bytes:
        """The log's name for `subject` of `service`."""
        return hmac.new(self._key, f"{service}\0{subject}".encode(), hashlib.sha256).digest()

    @classmethod
    def from_file(cls, path: Path) -> SubjectHasher:
        """The key in `path`, created (random, mode 0600) when the file does not exist.

        The key is written whole to a private file first and then hard-linked to `path`, so
        a process of `--workers N` that starts at the same moment finds either no key or the
        whole key, never the empty file another is still writing.
        """
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            draft = path.with_name(f".{path.name}.{os.getpid()}")
            fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(os.urandom(_KEY_BYTES))
                    out.flush()
                    os.fsync(out.fileno())
                os.link(draft, path)
            except FileExistsError:  # another process of `--workers N` made it first
                pass
            finally:
                draft.unlink(missing_ok=True)
        return cls(path.read_bytes())


def log_path(erasure: ErasureSettings, sqlite: SqliteSettings) -> Path:
    """Where the log lives: its setting, else ``erasures.sqlite3`` in the data directory."""
    return Path(erasure.log_file or Path(sqlite.data_dir) / "erasures.sqlite3")


def key_path(erasure: ErasureSettings, sqlite: SqliteSettings) -> Path:
    """Where the key lives: its setting, else ``erasure.key`` beside the log."""
    return Path(erasure.key_file or log_path(erasure, sqlite).with_name("erasure.key"))


class ErasureRecorder:
    """The erasure log and the hasher of its subjects, together."""

    def __init__(self, log: ErasureLog, hasher: SubjectHasher) -> None:
        self.log = log
        self.hasher = hasher

    async def erased(self, service: str, subjects: Iterable[str]) -> None:
        """Records that `subjects` of `service` are being erased (idempotent)."""
        at = now_ms()
        await self.log.record(
            [
                Erasure(service=service, subject=self.hasher.digest(service, s), erased_at_ms=at)
                for s in set(subjects)
            ]
        )

    async def matching(self, service: str, candidates: Iterable[str]) -> list[str]:
        """Those of `candidates` that the log says were erased from `service`."""
        erased = await self.log.subjects(service)
        if not erased:
            return []
        return sorted({c for c in candidates if self.hasher.digest(service, c) in erased})

    async def close(self) -> None:
        await self.log.close()


async def open_recorder(erasure: ErasureSettings, sqlite: SqliteSettings) -> ErasureRecorder:
    """The deployment's log and key (both created when missing)."""
    hasher = SubjectHasher.from_file(key_path(erasure, sqlite))
    log = await open_erasure_log(log_path(erasure, sqlite), sqlite)
    return ErasureRecorder(log, hasher)
