"""What a real email template source is: a pinned package, its families, its templates.

Shared by `email_sources` (the first packages and the reading of archives) and
`email_packs` (the sibling families added later), so that neither imports the other's
tables. Also the ground-truth *vertical* of a template, decided by `vertical_of`'s rule
table over its family and name (the table is in `loadtest/corpora/README.md` too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["VERTICALS", "VERTICAL_RULES", "Family", "Package", "SourceTemplate", "vertical_of"]


@dataclass(frozen=True)
class Family:
    """One group of templates of a package, sent by one sender in one layout family."""

    family: str
    sender: str
    syntax: str
    """static, handlebars, django, jinja, go, freemarker or benchpress."""
    prefix: str
    """Folder of the templates inside the archive (each file directly in it is one)."""
    files_root: str = ""
    """Folder that include/extends names are relative to (default: `prefix`)."""
    exclude: tuple[str, ...] = ()
    """Regular expressions of file names under `prefix` that are not templates."""
    recursive: bool = False
    """Templates in sub-folders too (their name keeps the sub-folder)."""
    messages: str = ""
    """The translation catalogue's path inside the archive (JSON or .properties)."""
    extra_roots: tuple[str, ...] = ()
    """More folders whose files the templates include (partials shared across services)."""
    reader: str = ""
    """A package whose templates are not one file each (`email_packs.READERS`)."""
    subject_file: bool = False
    """The real subject is the sibling file ``<name without _body>_subject.txt``."""
    subject_key: str = ""
    """The real subject is the catalogue's ``<name in camelCase><subject_key>`` (Keycloak)."""
    subjects: tuple[tuple[str, str], ...] = ()
    """Real subjects by template name, written in the family's syntax (from the sender's
    code or catalogue)."""


@dataclass(frozen=True)
class Package:
    """One pinned archive of a registry and the template families taken from it."""

    registry: str
    name: str
    version: str
    digest: str
    """npm: the registry's sha512 integrity; otherwise ``sha256:<hex>`` of the file."""
    license: str
    license_file: str
    """Path of the licence text inside the archive ("" when only the POM declares it)."""
    license_marker: str
    families: tuple[Family, ...]


VERTICALS = ("receipt", "bill", "shipping", "travel", "account", "newsletter", "other")

VERTICAL_RULES: tuple[tuple[str, str], ...] = (
    ("shipping", r"ship|(?<!gift-)deliver|dispatch|fulfil|tracking|parcel"),
    ("travel", r"flight|trip|travel|itinerar|boarding|hotel|booking"),
    ("bill", r"invoice|bill|renew|trial|overdue|payment.fail|cancel|expir"),
    ("receipt", r"order|receipt|purchase|payment|paid|gift|donation|checkout|subscription"),
    (
        "account",
        r"reset|passw|verif|confirm|welcome|invit|2fa|otp|login|activat|regist|signup|"
        r"credential|lockout|account|email.change|change.email|email.update|security|"
        r"auth|identity|keycloak",
    ),
    ("newsletter", r"digest|newsletter|new.post|announce|weekly|latest"),
)
"""(vertical, pattern): the first pattern found in the template's name decides; when none
is, the first found in its family's name; else ``other``."""


def vertical_of(family: str, name: str) -> str:
    """The ground-truth vertical of template `name` of `family` (`VERTICAL_RULES`)."""
    for text in (name.lower(), family.lower()):
        for vertical, pattern in VERTICAL_RULES:
            if re.search(pattern, text):
                return vertical
    return "other"


@dataclass(frozen=True)
class SourceTemplate:
    """One real template: its family (layout group), name, sender, language and source."""

    family: str
    name: str
    sender: str
    source: str
    files: dict[str, str] = field(default_factory=dict)
    """Partials, layouts and includes, by the name the source refers to them with."""
    syntax: str = "handlebars"
    messages: dict[str, str] = field(default_factory=dict)
    """Its translation catalogue."""
    package: str = ""
    """The registry package it came from (figures per source, leave-one-source-out)."""
    subject: str = ""
    """Its real subject line as a template in `syntax` ("" when the source has none)."""

    @property
    def label(self) -> str:
        """The ground-truth template label: ``family/name``."""
        return f"{self.family}/{self.name}"

    @property
    def vertical(self) -> str:
        """Its ground-truth vertical (`vertical_of`)."""
        return vertical_of(self.family, self.name)
