"""Online backups of the embedded SQLite stores, and their restore into a fresh directory.

A backup copies each store with SQLite's online backup API in one step. The stores run in
WAL mode, so the copy reads one consistent snapshot under a read transaction while the
server keeps writing (writers append to the WAL; only checkpoints wait for the copy), and
the copy is the store as of that snapshot, every write acknowledged before the backup began
included. Each copy is checked with ``PRAGMA integrity_check`` and described, with its
sha256, in ``backup.json``; a restore checks those again before it copies anything into a
data directory that holds no store yet.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["BACKUP_MANIFEST", "BackupError", "Copied", "backup", "restore", "snapshot"]

BACKUP_MANIFEST = "backup.json"

STORE_FILES = (
    "threadweaver.sqlite3",
    "summary.sqlite3",
    "inbox.sqlite3",
    "templates.sqlite3",
    "iterator-state.sqlite3",
    "iterator-queue.sqlite3",
    "iterator-source.sqlite3",
)
"""The embedded stores a data directory may hold."""


class BackupError(ValueError):
    """A backup or restore that cannot proceed; the message names the file."""


@dataclass(frozen=True, slots=True)
class Copied:
    """One store copied: its name, size, hash and how long the copy held its snapshot."""

    name: str
    bytes: int
    sha256: str
    seconds: float


def snapshot(source: Path, target: Path) -> float:
    """Copies the SQLite database `source` to `target` (which must not exist) as of one
    consistent point in time, while others keep writing it; returns the seconds it took."""
    if target.exists():
        raise BackupError(f"{target}: already exists")
    started = time.monotonic()
    src = sqlite3.connect(source, timeout=30)
    try:
        dst = sqlite3.connect(target)
        try:
            src.backup(dst, pages=-1)  # one step: one snapshot, never restarted by writers
            dst.execute("PRAGMA journal_mode=WAL")  # as the adapters open it
        finally:
            dst.close()
    finally:
        src.close()
    return time.monotonic() - started


def _check(path: Path) -> None:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        verdict = conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()
    if verdict != "ok":
        raise BackupError(f"{path}: integrity_check says {verdict!r}")


def _sha256(path: Path) -> str:
    with path.open("rb") as src:
        return hashlib.file_digest(src, "sha256").hexdigest()


def backup(data_dir: Path, out: Path) -> list[Copied]:
    """Copies every store of `data_dir` into `out` (new or empty), checks each copy, and
    writes ``backup.json`` last."""
    stores = [data_dir / name for name in STORE_FILES if (data_dir / name).exists()]
    if not stores:
        raise BackupError(f"{data_dir}: no Loom store here (is it the server's --data-dir?)")
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise BackupError(f"{out}: not empty; back up into a new directory")
    copied: list[Copied] = []
    for store in stores:
        seconds = snapshot(store, out / store.name)
        _check(out / store.name)
        path = out / store.name
        copied.append(Copied(store.name, path.stat().st_size, _sha256(path), seconds))
    manifest = {
        "taken_at": datetime.now(UTC).isoformat(),
        "source": str(data_dir),
        "files": [
            {"name": c.name, "bytes": c.bytes, "sha256": c.sha256, "seconds": round(c.seconds, 3)}
            for c in copied
        ],
    }
    partial = out / (BACKUP_MANIFEST + ".partial")
    partial.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    partial.replace(out / BACKUP_MANIFEST)
    return copied


def restore(backup_dir: Path, data_dir: Path) -> list[str]:
    """Copies a backup's stores into `data_dir`, which must hold no store: every file is
    checked (size, sha256, integrity_check) before the first is copied."""
    path = backup_dir / BACKUP_MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        files = [(f["name"], int(f["bytes"]), str(f["sha256"])) for f in manifest["files"]]
    except FileNotFoundError:
        raise BackupError(
            f"{path}: no backup manifest (not a backup, or an unfinished one)"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise BackupError(f"{path}: not a backup manifest: {exc}") from None
    for name, size, sha in files:
        file = backup_dir / name
        if name not in STORE_FILES:
            raise BackupError(f"{path}: {name!r} is not a Loom store")
        if not file.exists() or file.stat().st_size != size or _sha256(file) != sha:
            raise BackupError(f"{file}: missing or changed since the backup (size or sha256)")
        _check(file)
    data_dir.mkdir(parents=True, exist_ok=True)
    present = [n for n in STORE_FILES if (data_dir / n).exists()]
    if present:
        raise BackupError(
            f"{data_dir}: already holds {', '.join(present)}; restore into a fresh data directory"
        )
    for name, _, _ in files:
        partial = data_dir / (name + ".partial")
        shutil.copyfile(backup_dir / name, partial)
        partial.replace(data_dir / name)
    return [name for name, _, _ in files]
