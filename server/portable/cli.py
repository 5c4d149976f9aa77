"""``loom dump``, ``loom load``, ``loom migrate``, ``loom backup`` and ``loom restore``.

Exit status: 0 done; 2 the input is wrong (bad settings, a dump that is tampered with, of
another version or another service, a running Iterator job) and nothing was written; 1 the
work failed (an engine unreachable, a migration whose target differs from its source).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from server import registry
from server.config import Settings, load_settings
from server.portable import erasures, transfer
from server.portable.backup import BackupError, backup, restore
from server.portable.format import MANIFEST, DumpError
from server.portable.records import ActiveJobs
from server.runtime.erasures import key_path, log_path

__all__ = ["add_commands", "run"]

ALL = "all"


def add_commands(sub: Any) -> None:
    """Adds the data commands to `loom`'s subcommand parser."""
    services = [*registry.portable(), ALL]
    d = sub.add_parser("dump", help="write a service's store (or all) into a portable dump")
    d.add_argument("--service", required=True, choices=services)
    d.add_argument("--out", required=True, type=Path, help="new directory for the dump")
    _settings_flags(d)
    ld = sub.add_parser("load", help="load a dump into the configured store (resumable)")
    ld.add_argument("--in", dest="src", required=True, type=Path, help="a dump directory")
    ld.add_argument("--service", choices=services, default=ALL)
    _settings_flags(ld)
    _erasure_flags(ld)
    m = sub.add_parser("migrate", help="stream stores from one deployment into another")
    m.add_argument("--from", dest="source", required=True, type=Path, help="source TOML")
    m.add_argument("--to", dest="target", required=True, type=Path, help="target TOML")
    m.add_argument("--service", required=True, choices=services)
    m.add_argument("--no-verify", action="store_true", help="skip the semantic comparison")
    b = sub.add_parser("backup", help="online, consistent copy of the embedded SQLite stores")
    b.add_argument("--data-dir", required=True, type=Path, help="the server's data directory")
    b.add_argument("--out", required=True, type=Path, help="new directory for the backup")
    r = sub.add_parser("restore", help="restore a backup into a fresh data directory")
    r.add_argument("--in", dest="src", required=True, type=Path, help="a backup directory")
    r.add_argument("--data-dir", required=True, type=Path, help="a data directory with no store")
    r.add_argument("--config", type=Path, help="TOML settings file (also LOOM_CONFIG)")
    _erasure_flags(r)


def _settings_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="TOML settings file (also LOOM_CONFIG)")
    parser.add_argument("--data-dir", help="directory of the embedded SQLite files")


def _erasure_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--erasure-log",
        type=Path,
        help="the deployment's erasure log, re-applied after the copy "
        "(default: the settings' erasure.log_file, else erasures.sqlite3 in the data directory)",
    )
    parser.add_argument(
        "--erasure-key", type=Path, help="its key (default: erasure.key beside the log)"
    )


def _named_log_exists(args: argparse.Namespace, settings: Settings) -> None:
    """A log (or key) named on the command line must exist: checked before anything is
    copied, so a typo stops the command with nothing written."""
    path, key = erasures.log_files(settings, args.erasure_log, args.erasure_key)
    for named, found in ((args.erasure_log, path), (args.erasure_key, key)):
        if named is not None and not found.exists():
            raise erasures.NoErasureLog(f"{found}: no such erasure log or key")


def _reapply(args: argparse.Namespace, settings: Settings, services: list[str]) -> None:
    """Erases again what the erasure log names and the copy brought back, and says so."""
    path, key = erasures.log_files(settings, args.erasure_log, args.erasure_key)
    if args.erasure_log is None and not path.exists():
        print(
            f"erasure log: none at {path}, nothing re-applied; if the data came from a "
            "deployment that erased anything, run again with --erasure-log",
            file=sys.stderr,
        )
        return

    async def run() -> list[erasures.Reapplied]:
        recorder = await erasures.open_log(path, key, settings)
        try:
            return [await erasures.reapply(s, settings, recorder) for s in services]
        finally:
            await recorder.close()

    for done in asyncio.run(run()):
        print(done.line())
    home = log_path(settings.erasure, settings.sqlite)
    if path.resolve() != home.resolve() and not home.exists():
        # The server on this data directory must keep recording into the same log, with the
        # same key, or the next restore could not recognise what was erased before.
        home.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, home)
        target_key = key_path(settings.erasure, settings.sqlite)
        if not target_key.exists():
            shutil.copyfile(key, target_key)
            target_key.chmod(0o600)
        print(f"erasure log: carried into {home} (with its key) for the server to keep using")


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.config, overrides={"sqlite": {"data_dir": args.data_dir}})


def run(args: argparse.Namespace) -> int:
    """Runs one data command; returns the exit status."""
    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "dump": _dump,
        "load": _load,
        "migrate": _migrate,
        "backup": _backup,
        "restore": _restore,
    }
    name = f"loom {args.command}"
    try:
        return commands[args.command](args)
    except (DumpError, BackupError, ActiveJobs, ValueError) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    except transfer.MigrationDiffers as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        print(f"{name}: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _chosen(service: str) -> list[str]:
    return list(registry.portable()) if service == ALL else [service]


def _present(service: str, settings: Settings) -> bool:
    """Whether there is a store to read: an embedded one exists only once written."""
    if registry.by_name(service).data.engine(settings) != "sqlite":
        return True
    return (Path(settings.sqlite.data_dir) / registry.by_name(service).data.sqlite_file).exists()


def _dump(args: argparse.Namespace) -> int:
    settings = _settings(args)
    services = _chosen(args.service)
    for service in services:
        if args.service == ALL and not _present(service, settings):
            print(f"loom dump: {service}: no store yet, skipped", file=sys.stderr)
            continue
        out = args.out / service if args.service == ALL else args.out
        opened = asyncio.run(transfer.dump(service, settings, out))
        counts = ", ".join(f"{f.kind} {f.records}" for f in opened.manifest.files)
        print(f"dumped {service} ({opened.manifest.consistency}) into {out}: {counts}")
    return 0


def _load(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if (args.src / MANIFEST).exists():
        dumps = [args.src]
        service = None if args.service == ALL else args.service
    else:  # a dump of all: one directory per service
        dumps = [args.src / s for s in _chosen(args.service) if (args.src / s / MANIFEST).exists()]
        if not dumps:
            raise DumpError(f"{args.src / MANIFEST}: no manifest here or in a service directory")
        service = None
    checked = [transfer.check(d, service) for d in dumps]  # all, before the first write
    _named_log_exists(args, settings)
    for opened in checked:
        moved = asyncio.run(transfer.load(opened, settings))
        print(f"loaded {moved.service}: {moved.records} records in {moved.seconds:.1f} s")
    _reapply(args, settings, [opened.manifest.service for opened in checked])
    return 0


def _migrate(args: argparse.Namespace) -> int:
    source = load_settings(args.source)
    target = load_settings(args.target)
    for service in _chosen(args.service):
        if args.service == ALL and not _present(service, source):
            print(f"loom migrate: {service}: no store yet, skipped", file=sys.stderr)
            continue
        moved = asyncio.run(transfer.migrate(service, source, target, verify=not args.no_verify))
        verified = "" if args.no_verify else ", target verified equal"
        print(
            f"migrated {service} {registry.by_name(service).data.engine(source)} -> {registry.by_name(service).data.engine(target)}: "
            f"{moved.records} records in {moved.seconds:.1f} s{verified}"
        )
    return 0


def _backup(args: argparse.Namespace) -> int:
    copied = backup(args.data_dir, args.out)
    for c in copied:
        print(f"backed up {c.name}: {c.bytes} bytes, snapshot copied in {c.seconds:.3f} s")
    return 0


def _restore(args: argparse.Namespace) -> int:
    settings = load_settings(args.config, overrides={"sqlite": {"data_dir": str(args.data_dir)}})
    _named_log_exists(args, settings)
    restored = restore(args.src, args.data_dir)
    for name in restored:
        print(f"restored {name} into {args.data_dir}")
    services = [
        name
        for name, entry in registry.portable().items()
        if entry.sqlite_file in restored and entry.engine(settings) == "sqlite"
    ]
    # A fresh data directory: no server weaves into it yet, so a mailbox's unweaving need
    # not wait out the grace that lets concurrent weaves see its marks.
    offline = replace(settings, threadweaver=replace(settings.threadweaver, retire_grace_s=0.0))
    _reapply(args, offline, services)
    return 0
