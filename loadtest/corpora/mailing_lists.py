"""Real public mailing-list mail, downloaded pinned from PyPI, never committed, and spread
over mailboxes threaded as Gmail threads them.

The messages come from the test data of Perceval (CHAOSS/GrimoireLab's fetcher), which
ships real archives of public lists (see `loadtest/corpora/README.md`, "Real mailing-list
mail"): their real Message-ID, In-Reply-To and References headers are what ThreadWeaver
unifies on. The sdist is fetched once with ``pip download`` into ``~/.cache/loom/corpora``
(``$LOOM_CACHE_DIR``), checked against its pinned SHA-256 (a mismatch deletes it and fails)
and against its licence text, and its mbox archives are parsed with `mailbox` and `email`.

`deliver` then plays the lists out: every message lands in a few subscribers' mailboxes,
each mailbox threads it as Gmail would (a message it replies to or references, else the
same subject within a few days; a new thread after 100 messages), and a third of the copies
carry their Message-ID bare, padded or as ``< id >``, as mail APIs hand them out.
"""

from __future__ import annotations

import email.policy
import email.utils
import hashlib
import mailbox
import os
import random
import re
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from datetime import UTC
from email.message import Message
from pathlib import Path

__all__ = [
    "LICENSE",
    "PACKAGE",
    "SHA256",
    "VERSION",
    "Delivery",
    "ListMessage",
    "deliver",
    "ensure_messages",
]

PACKAGE = "perceval"
VERSION = "1.6.1"
SHA256 = "592b07d34ae0b382188d3b72c2fc7191091b94b56973dab2aef3221e0bd9721e"
LICENSE = "GPL-3.0-or-later"
_LICENSE_FILE = f"perceval-{VERSION}/LICENSE"
_LICENSE_MARKER = "GNU GENERAL PUBLIC LICENSE"
_ARCHIVES = f"perceval-{VERSION}/tests/data/"
_MBOX_FOLDERS = ("mbox/", "pipermail/", "hyperkitty/")
_ZIPPED = ("groupsio/messages.zip",)
_IDS = re.compile(r"<[^<>\s]+>")
_GMAIL_THREAD_MAX = 100
_SUBJECT_WINDOW_S = 3 * 86_400


@dataclass(frozen=True)
class ListMessage:
    """One message of a public list, as its archive holds it."""

    list_name: str
    message_id: str
    """The Message-ID header as sent (normally ``<local@domain>``)."""
    parents: tuple[str, ...]
    """Message-IDs it replies to or references (In-Reply-To, then References)."""
    subject: str
    sent_at_s: int


@dataclass(frozen=True)
class Delivery:
    """One copy of a message in one subscriber's mailbox."""

    gid: str
    thread_id: str
    rfc_message_id: str
    """The Message-ID as this mailbox's mail API hands it out (bare, padded, ...)."""
    sent_at_s: int
    list_name: str


def cache_dir() -> Path:
    """Where downloaded packages are kept (``$LOOM_CACHE_DIR`` or ``~/.cache/loom``)."""
    base = os.environ.get("LOOM_CACHE_DIR") or str(Path.home() / ".cache" / "loom")
    return Path(base) / "corpora"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sdist() -> Path:
    """The pinned sdist, downloaded with pip when missing, always checked."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{PACKAGE}-{VERSION}.tar.gz"
    if not path.exists() or _sha256(path) != SHA256:
        path.unlink(missing_ok=True)
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"),
                *("--no-binary", ":all:", "--dest", str(folder), f"{PACKAGE}=={VERSION}"),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=600,
        )
    got = _sha256(path)
    if got != SHA256:
        path.unlink(missing_ok=True)
        raise RuntimeError(f"{PACKAGE} {VERSION}: sha256 {got} != pinned {SHA256}")
    return path


def _extract(sdist: Path) -> list[Path]:
    """The mbox archives, unpacked once beside the sdist (licence checked first)."""
    target = sdist.with_suffix("").with_suffix("")  # perceval-1.6.1/
    with tarfile.open(sdist) as tar:
        licence = tar.extractfile(_LICENSE_FILE)
        if licence is None or _LICENSE_MARKER not in licence.read().decode():
            raise RuntimeError(f"{PACKAGE} {VERSION}: {_LICENSE_FILE} is not the GPL it was")
        found: list[Path] = []
        for member in tar.getmembers():
            rest = member.name.removeprefix(_ARCHIVES)
            wanted = rest.endswith(".mbox") and rest.startswith(_MBOX_FOLDERS)
            if not member.isfile() or rest == member.name or not (wanted or rest in _ZIPPED):
                continue
            out = target / rest
            if not out.exists():
                out.parent.mkdir(parents=True, exist_ok=True)
                data = tar.extractfile(member)
                out.write_bytes(data.read() if data else b"")
            if rest in _ZIPPED:
                with zipfile.ZipFile(out) as archive:
                    for name in archive.namelist():
                        inner = out.with_name(f"{out.stem}-{Path(name).name}")
                        if not inner.exists():
                            inner.write_bytes(archive.read(name))
                        found.append(inner)
            else:
                found.append(out)
    return sorted(found)


def _list_name(message: Message, archive: Path) -> str:
    """The list a message was archived from: its List-Id, else the archive it sits in."""
    list_id = str(message.get("List-Id") or "")
    inside = re.search(r"<([^<>]+)>", list_id)
    return inside.group(1) if inside else f"{archive.parent.name}/{archive.stem}"


def _sent_at(message: Message) -> int | None:
    try:
        when = email.utils.parsedate_to_datetime(str(message.get("Date") or ""))
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp())


def ensure_messages() -> list[ListMessage]:
    """Every message with a Message-ID and a date, once each, in archive order."""
    seen: dict[str, ListMessage] = {}
    for archive in _extract(_sdist()):
        box = mailbox.mbox(archive, create=False)
        try:
            raws = [
                # From the bytes: mailbox's own parse decodes the From_ line as ASCII and
                # some archived lines are not.
                email.message_from_bytes(box.get_bytes(key), policy=email.policy.compat32)
                for key in box.iterkeys()
            ]
        finally:
            box.close()
        for raw in raws:
            message_id = " ".join(str(raw.get("Message-ID") or "").split())
            sent_at = _sent_at(raw)
            if not _IDS.fullmatch(message_id) or sent_at is None or message_id in seen:
                continue
            parents = _IDS.findall(f"{raw.get('In-Reply-To') or ''} {raw.get('References') or ''}")
            seen[message_id] = ListMessage(
                list_name=_list_name(raw, archive),
                message_id=message_id,
                parents=tuple(dict.fromkeys(p for p in parents if p != message_id)),
                subject=" ".join(str(raw.get("Subject") or "").split()),
                sent_at_s=sent_at,
            )
    return list(seen.values())


def _topic(subject: str) -> str:
    """A subject as Gmail compares it: without Re:/Fwd: prefixes, case folded."""
    return re.sub(r"^((re|fwd?|aw)\s*:\s*)+", "", subject, flags=re.IGNORECASE).casefold()


def _spelling(message_id: str, rng: random.Random) -> str:
    """The header as sent two times in three; else bare, padded or ``< id >``."""
    if rng.random() < 2 / 3:
        return message_id
    inner = message_id[1:-1]
    return rng.choice([inner, f"  {message_id} ", f"< {inner} >"])


class _Mailbox:
    """One subscriber's Gmail threading state."""

    def __init__(self, gid: str) -> None:
        self.gid = gid
        self.by_message: dict[str, str] = {}
        self.by_topic: dict[str, tuple[str, int]] = {}
        self.sizes: dict[str, int] = {}

    def thread_of(self, message: ListMessage) -> str:
        topic = _topic(message.subject)
        thread = next((self.by_message[p] for p in message.parents if p in self.by_message), None)
        if thread is None and topic in self.by_topic:
            candidate, last = self.by_topic[topic]
            if abs(message.sent_at_s - last) <= _SUBJECT_WINDOW_S:
                thread = candidate
        if thread is None or self.sizes.get(thread, 0) >= _GMAIL_THREAD_MAX:
            thread = f"{len(self.sizes) + 1:016x}"  # a Gmail-like hex thread id
        self.sizes[thread] = self.sizes.get(thread, 0) + 1
        self.by_message[message.message_id] = thread
        self.by_topic[topic] = (thread, message.sent_at_s)
        return thread


def deliver(messages: list[ListMessage], *, seed: int, namespace: str) -> list[Delivery]:
    """Each list gets its own subscribers (a few shared with other lists); each message, in
    the order it was sent, lands in 1-4 of them and is threaded there as Gmail would."""
    rng = random.Random(seed)
    lists = sorted({m.list_name for m in messages})
    shared = [_Mailbox(f"{namespace}-shared-{i}") for i in range(3)]
    members = {
        name: [_Mailbox(f"{namespace}-l{n}-u{i}") for i in range(2 + 2 * rng.randint(1, 4))]
        + rng.sample(shared, 2)
        for n, name in enumerate(lists)
    }
    out: list[Delivery] = []
    for message in sorted(messages, key=lambda m: (m.sent_at_s, m.message_id)):
        for box in rng.sample(members[message.list_name], rng.randint(1, 4)):
            out.append(
                Delivery(
                    gid=box.gid,
                    thread_id=box.thread_of(message),
                    rfc_message_id=_spelling(message.message_id, rng),
                    sent_at_s=message.sent_at_s,
                    list_name=message.list_name,
                )
            )
    return out
