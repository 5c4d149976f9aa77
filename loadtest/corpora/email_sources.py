"""Real third-party email templates, downloaded pinned from the npm registry, never committed.

Sources (see `loadtest/corpora/README.md`; both MIT-licensed):

- ``foundation-emails@2.5.1`` (ZURB): the eleven compiled templates under
  ``.download/templates/`` — one layout (Foundation for Emails' grid) reused for order,
  password, welcome, newsletter, drip, marketing, hero, sidebar… templates.
- ``ghost@6.65.0`` (Ghost Foundation): its transactional emails — staff notifications
  (``services/staff/email-templates``), comment notifications, gift emails and the admin
  mail templates — Handlebars sources sharing a few layouts.

`ensure_sources()` runs ``npm pack <name>@<version>`` (the registry's ordinary client) into
``~/.cache/loom/corpora`` once, checks the tarball's pinned sha512 integrity, and reads the
template files out of it; later runs read the cache.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PACKAGES", "Package", "SourceTemplate", "cache_dir", "ensure_sources"]


@dataclass(frozen=True)
class Package:
    """One pinned npm package and the template files taken from it."""

    name: str
    version: str
    integrity: str
    license: str
    members: tuple[tuple[str, str, str], ...]
    """(family, sender, path prefix inside the tarball) of each template group."""


PACKAGES = (
    Package(
        "foundation-emails",
        "2.5.1",
        "sha512-1Yp9MbN8qJZrLUXMyQ5clLm+Ea663J7cSc//Y8EfCM21IkD7N2xYB7vRlSnnQy3fIB3TnI25IpW2VJHqXm9UkA==",
        "MIT",
        (("foundation", "hello@foundation-shop.example", "package/.download/templates/"),),
    ),
    Package(
        "ghost",
        "6.65.0",
        "sha512-D369qivOmfn4YwvBD1DljOGsHnJzBEQhBsiFnBZD+GjWrBpdZQYYNHneiQcKQVJwUom8eHWml1n5FRLQIwVFOg==",
        "MIT",
        (
            (
                "ghost-staff",
                "noreply@ghost-blog.example",
                "package/core/server/services/staff/email-templates/",
            ),
            (
                "ghost-comments",
                "noreply@ghost-blog.example",
                "package/core/server/services/comments/email-templates/",
            ),
            (
                "ghost-gifts",
                "noreply@ghost-blog.example",
                "package/core/server/services/gifts/email-templates/",
            ),
            (
                "ghost-mail",
                "ghost@ghost-admin.example",
                "package/core/server/services/mail/templates/",
            ),
        ),
    ),
)


@dataclass(frozen=True)
class SourceTemplate:
    """One real template: its family (layout group), name, sender and raw source."""

    family: str
    name: str
    sender: str
    source: str
    partials: dict[str, str]
    """Handlebars partials of its directory (``partials/*.hbs``) by name."""


def cache_dir() -> Path:
    """Where downloaded packages are kept (``$LOOM_CACHE_DIR`` or ``~/.cache/loom``)."""
    base = os.environ.get("LOOM_CACHE_DIR") or str(Path.home() / ".cache" / "loom")
    return Path(base) / "corpora"


def _integrity(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def _tarball(pkg: Package) -> Path:
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{pkg.name}-{pkg.version}.tgz"
    if not path.exists() or _integrity(path) != pkg.integrity:
        subprocess.run(
            [
                "npm",
                "pack",
                f"{pkg.name}@{pkg.version}",
                "--silent",
                "--pack-destination",
                str(folder),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=600,
        )
    got = _integrity(path)
    if got != pkg.integrity:
        path.unlink(missing_ok=True)
        raise RuntimeError(f"{pkg.name}@{pkg.version}: integrity {got} != pinned {pkg.integrity}")
    return path


def ensure_sources() -> list[SourceTemplate]:
    """Every real template, downloading and verifying the pinned packages when needed."""
    found: list[SourceTemplate] = []
    for pkg in PACKAGES:
        with tarfile.open(_tarball(pkg)) as tar:
            files = {
                m.name: tar.extractfile(m).read().decode("utf-8", "replace")  # type: ignore[union-attr]
                for m in tar.getmembers()
                if m.isfile() and any(m.name.startswith(prefix) for _, _, prefix in pkg.members)
            }
        for family, sender, prefix in pkg.members:
            partials = {
                Path(n).stem: text
                for n, text in files.items()
                if n.startswith(prefix + "partials/") and n.endswith(".hbs")
            }
            for name, text in sorted(files.items()):
                rest = name[len(prefix) :]
                if not name.startswith(prefix) or "/" in rest:
                    continue
                if not rest.endswith((".html", ".hbs")) or "layout" in rest or rest == "test.html":
                    continue
                found.append(SourceTemplate(family, Path(rest).stem, sender, text, partials))
    return found
