"""Real third-party email templates, downloaded pinned from four registries, never committed.

Seven independent, permissively licensed collections here (an eighth, mailgen, is
`mailgen_templates.py`; the sibling packs added later are `email_packs.py`; see
`loadtest/corpora/README.md`):

==================  ========  ===========  ============  =====================================
package             registry  licence      language      templates
==================  ========  ===========  ============  =====================================
foundation-emails   npm       MIT          static HTML   ZURB's compiled demos (one grid)
ghost               npm       MIT          Handlebars    staff, comment, gift and admin mail
django-oscar        PyPI      BSD-3        Django        a shop's customer mail (one base)
wagtail             PyPI      BSD-3        Django        CMS workflow notifications (one base)
Flask-Security-Too  PyPI      MIT          Jinja         account mail (bare fragments)
gitea               Go proxy  MIT          Go template   forge notifications (locale JSON)
keycloak-themes     Maven     Apache-2.0   FreeMarker    identity mail (message catalogue)
==================  ========  ===========  ============  =====================================

Each archive is fetched once with the registry's own client (``npm pack``, ``pip
download``, ``go mod download``, ``mvn dependency:copy``) into ``~/.cache/loom/corpora``
(``$LOOM_CACHE_DIR``), checked against its pinned digest (a mismatch deletes it and fails)
and against its licence text, and read in memory; later runs read the cache.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

from loadtest.corpora.email_model import Family, Package, SourceTemplate
from loadtest.corpora.email_packs import PACKS, READERS

__all__ = [
    "PACKAGES",
    "Family",
    "Package",
    "SourceTemplate",
    "cache_dir",
    "ensure_sources",
]


_OSCAR = "oscar/templates/"
_WAGTAIL = "wagtail/admin/templates/"
_GITEA = "code.gitea.io/gitea@v1.26.0/"
_GHOST = "package/core/server/services/"
_TR = '{{.locale.Tr "mail.'
_GITEA_SUBJECTS = (  # its catalogue's subjects; issue mail's subject as its mailer builds it
    ("user/auth/activate", _TR + 'activate_account"}}'),
    ("user/auth/activate_email", _TR + 'activate_email"}}'),
    ("user/auth/register_notify", _TR + 'register_notify" .AppName}}'),
    ("user/auth/reset_passwd", _TR + 'reset_password"}}'),
    ("repo/release", _TR + 'release.new.subject" .Release.TagName .Repo.FullName}}'),
    ("repo/transfer", _TR + 'repo.transfer.subject_to_you" .Doer.Name .Repo.FullName}}'),
    ("repo/collaborator", _TR + 'repo.collaborator.added.subject" .Doer.Name .RepoName}}'),
    ("org/team_invite", _TR + 'team_invite.subject" .Inviter.Name .Organization.Name}}'),
    ("repo/issue/default", "[{{.Repo.FullName}}] {{.Issue.Title}} (#{{.Issue.Index}})"),
    ("repo/issue/assigned", "[{{.Repo.FullName}}] {{.Issue.Title}} (#{{.Issue.Index}})"),
    ("repo/actions/workflow_run", "[{{.Repo.FullName}}] {{.Run.Title}} ({{.Run.Status}})"),
)

_FIRST_PACKAGES = (
    Package(
        "npm",
        "foundation-emails",
        "2.5.1",
        "sha512-1Yp9MbN8qJZrLUXMyQ5clLm+Ea663J7cSc//Y8EfCM21IkD7N2xYB7vRlSnnQy3fIB3TnI25IpW2VJHqXm9UkA==",
        "MIT",
        "package/LICENSE.md",
        "Permission is hereby granted, free of charge",
        (
            Family(
                "foundation",
                "hello@foundation-shop.example",
                "static",
                "package/.download/templates/",
            ),
        ),
    ),
    Package(
        "npm",
        "ghost",
        "6.65.0",
        "sha512-D369qivOmfn4YwvBD1DljOGsHnJzBEQhBsiFnBZD+GjWrBpdZQYYNHneiQcKQVJwUom8eHWml1n5FRLQIwVFOg==",
        "MIT",
        "package/LICENSE",
        "Permission is hereby granted, free of charge",
        (
            Family(
                "ghost-staff",
                "noreply@ghost-blog.example",
                "handlebars",
                _GHOST + "staff/email-templates/",
            ),
            Family(
                "ghost-comments",
                "noreply@ghost-blog.example",
                "handlebars",
                _GHOST + "comments/email-templates/",
            ),
            Family(
                "ghost-gifts",
                "noreply@ghost-blog.example",
                "handlebars",
                _GHOST + "gifts/email-templates/",
                exclude=(r"layout",),
            ),
            Family(
                "ghost-newsletter",
                "newsletter@ghost-blog.example",
                "handlebars",
                _GHOST + "email-service/email-templates/",
                extra_roots=(_GHOST + "email-rendering/partials/",),
            ),
            Family(
                "ghost-mail",
                "ghost@ghost-admin.example",
                "handlebars",
                _GHOST + "mail/templates/",
                exclude=(r"^test\.html$",),
            ),
        ),
    ),
    Package(
        "pypi",
        "django-oscar",
        "4.2.1",
        "sha256:adbb95ea0130859c204cc6fb221052d6d437ecbaa90800e8418a809f72645e9c",
        "BSD-3-Clause",
        "django_oscar-4.2.1.dist-info/licenses/LICENSE",
        "Redistribution and use in source and binary forms",
        (
            Family(
                "oscar",
                "orders@oscar-shop.example",
                "django",
                _OSCAR + "oscar/communication/emails/",
                _OSCAR,
                exclude=(r"^base\.html$",),
                subject_file=True,
            ),
        ),
    ),
    Package(
        "pypi",
        "wagtail",
        "8.0.1",
        "sha256:1e6ad5c7891a54efce1400e168298b5a2cc343b642cee89c31bf5ec30c98b26c",
        "BSD-3-Clause",
        "wagtail-8.0.1.dist-info/licenses/LICENSE",
        "Redistribution and use in source and binary forms",
        (
            Family(
                "wagtail",
                "cms@wagtail-site.example",
                "django",
                _WAGTAIL + "wagtailadmin/notifications/",
                _WAGTAIL,
                exclude=(r"^base",),
                subject_file=True,
            ),
        ),
    ),
    Package(
        "pypi",
        "Flask-Security-Too",
        "5.9.2",
        "sha256:98f5e676767735dd2ff48afa92bcc9916778306b103999f8f4538a36b096f111",
        "MIT",
        "flask_security_too-5.9.2.dist-info/licenses/LICENSE.txt",
        "Permission is hereby granted, free of charge",
        (
            Family(
                "flask-security",
                "accounts@flask-app.example",
                "jinja",
                "flask_security/templates/security/email/",
            ),
        ),
    ),
    Package(
        "go",
        "code.gitea.io/gitea",
        "v1.26.0",
        "sha256:056d9f54e48aa71f81e4b6da6dce66a58b93371c866c69b872c51c7a84b11689",
        "MIT",
        _GITEA + "LICENSE",
        "Permission is hereby granted, free of charge",
        (
            Family(
                "gitea",
                "gitea@forge.example",
                "go",
                _GITEA + "templates/mail/",
                _GITEA + "templates/",
                exclude=(r"\.yml$",),
                recursive=True,
                messages=_GITEA + "options/locale/locale_en-US.json",
                subjects=_GITEA_SUBJECTS,
            ),
        ),
    ),
    Package(
        "maven",
        "org.keycloak:keycloak-themes",
        "26.7.3",
        "sha256:32189fbfb6da000a9be7836169790ddf7400ebe68c1b06b8ac31f220fed9f829",
        "Apache-2.0",
        "",
        "",
        (
            Family(
                "keycloak",
                "no-reply@keycloak-realm.example",
                "freemarker",
                "theme/base/email/html/",
                exclude=(r"^template\.ftl$",),
                messages="theme/base/email/messages/messages_en.properties",
                subject_key="Subject",
            ),
        ),
    ),
)
PACKAGES = (*_FIRST_PACKAGES, *PACKS)
"""Every pinned package: the first seven here, the sibling packs of `email_packs`."""


def cache_dir() -> Path:
    """Where downloaded packages are kept (``$LOOM_CACHE_DIR`` or ``~/.cache/loom``)."""
    base = os.environ.get("LOOM_CACHE_DIR") or str(Path.home() / ".cache" / "loom")
    return Path(base) / "corpora"


def _digest(path: Path, pinned: str) -> str:
    data = path.read_bytes()
    if pinned.startswith("sha512-"):
        return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False, **kw)


def _go() -> str:
    found = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if found is None:
        raise RuntimeError("the Go toolchain is needed once to download gitea's templates")
    return found


def _fetch(pkg: Package, folder: Path) -> Path:
    """Downloads `pkg` with its registry's own client; returns the archive's path."""
    if pkg.registry == "npm":
        done = _run(
            [
                "npm",
                "pack",
                f"{pkg.name}@{pkg.version}",
                "--silent",
                "--pack-destination",
                str(folder),
            ]
        )
        path = folder / f"{pkg.name}-{pkg.version}.tgz"
    elif pkg.registry == "pypi":
        done = _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "-q",
                "-d",
                str(folder),
                f"{pkg.name}=={pkg.version}",
            ]
        )
        wheel = re.sub(r"[-.]", "_", pkg.name).lower()
        matches = sorted(folder.glob(f"{wheel}-{pkg.version}-*.whl"))
        path = matches[0] if matches else folder / f"{wheel}-{pkg.version}.whl"
    elif pkg.registry == "go":
        done = _run(
            [_go(), "mod", "download", "-json", f"{pkg.name}@{pkg.version}"],
            env={**os.environ, "GOFLAGS": "-mod=mod"},
        )
        zipped = json.loads(done.stdout or "{}").get("Zip", "") if done.returncode == 0 else ""
        path = folder / f"{pkg.name.replace('/', '_')}-{pkg.version}.zip"
        if zipped:
            shutil.copyfile(zipped, path)
    else:  # maven: copied straight into the cache (its local repository is Java's
        # user.home, which need not be $HOME)
        _, artifact = pkg.name.split(":")
        path = folder / f"{artifact}-{pkg.version}.jar"
        command = [
            "mvn",
            "-B",
            "-q",
            "-Dstyle.color=never",
            "dependency:copy",
            f"-Dartifact={pkg.name}:{pkg.version}",
            f"-DoutputDirectory={folder}",
        ]
        done = _run([*command, "-o"])
        if done.returncode != 0:
            done = _run(command)
    if not path.exists():
        raise RuntimeError(
            f"{pkg.registry} {pkg.name}@{pkg.version}: download failed: "
            f"{(done.stderr or done.stdout).strip()[-500:]}"
        )
    return path


def _archive(pkg: Package) -> Path:
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    stem = pkg.name.replace("/", "_").replace(":", "_")
    pinned = folder / f"{stem}-{pkg.version}.{'tgz' if pkg.registry == 'npm' else 'zip'}"
    if pinned.exists() and _digest(pinned, pkg.digest) == pkg.digest:
        return pinned
    path = _fetch(pkg, folder)
    got = _digest(path, pkg.digest)
    if got != pkg.digest:
        path.unlink(missing_ok=True)
        raise RuntimeError(f"{pkg.name}@{pkg.version}: digest {got} != pinned {pkg.digest}")
    if path != pinned:
        path.replace(pinned)
    return pinned


def _read_members(path: Path, prefixes: list[str]) -> dict[str, str]:
    """Every text file under one of `prefixes` inside the archive, by its path."""
    out: dict[str, str] = {}
    if path.suffix == ".tgz":
        with tarfile.open(path) as tar:
            for m in tar.getmembers():
                if m.isfile() and any(m.name.startswith(p) for p in prefixes):
                    out[m.name] = tar.extractfile(m).read().decode("utf-8", "replace")  # type: ignore[union-attr]
        return out
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if not name.endswith("/") and any(name.startswith(p) for p in prefixes):
                out[name] = z.read(name).decode("utf-8", "replace")
    return out


def _catalogue(text: str, path: str) -> dict[str, str]:
    if path.endswith(".json"):
        return {k: v for k, v in json.loads(text).items() if isinstance(v, str)}
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            found[key.strip()] = value.strip()
    return found


_TEMPLATE_SUFFIXES = (".html", ".hbs", ".tmpl", ".ftl", ".tpl")


def ensure_sources() -> list[SourceTemplate]:
    """Every real template, downloading and verifying the pinned packages when needed."""
    found: list[SourceTemplate] = []
    for pkg in PACKAGES:
        path = _archive(pkg)
        prefixes = [f.files_root or f.prefix for f in pkg.families] + [
            f.prefix for f in pkg.families
        ]
        prefixes += [f.messages for f in pkg.families if f.messages]
        prefixes += [root for f in pkg.families for root in f.extra_roots]
        prefixes += [pkg.license_file] if pkg.license_file else []
        files = _read_members(path, prefixes)
        if pkg.license_file and pkg.license_marker not in files.get(pkg.license_file, ""):
            raise RuntimeError(f"{pkg.name}@{pkg.version}: {pkg.license_file} is not {pkg.license}")
        for fam in pkg.families:
            root = fam.files_root or fam.prefix
            shared = {
                n[len(r) :]: text
                for r in (*fam.extra_roots, root)
                for n, text in files.items()
                if n.startswith(r)
            }
            if fam.syntax == "handlebars":  # partials go by stem, registered camelCase too
                for n, text in list(shared.items()):
                    stem = Path(n).stem
                    shared[stem] = text
                    shared[re.sub(r"-(\w)", lambda m: m.group(1).upper(), stem)] = text
            messages = _catalogue(files[fam.messages], fam.messages) if fam.messages else {}
            if fam.reader:
                found += READERS[fam.reader](fam, files, shared, messages, pkg.name)
                continue
            for name, text in sorted(files.items()):
                rest = name[len(fam.prefix) :]
                if not name.startswith(fam.prefix) or not rest.endswith(_TEMPLATE_SUFFIXES):
                    continue
                if ("/" in rest and not fam.recursive) or "partials/" in rest:
                    continue
                if any(re.search(x, Path(rest).name) for x in fam.exclude):
                    continue
                stem = str(Path(rest).with_suffix(""))
                found.append(
                    SourceTemplate(
                        fam.family,
                        stem,
                        fam.sender,
                        text,
                        shared,
                        fam.syntax,
                        messages,
                        pkg.name,
                        _real_subject(fam, stem, files, messages),
                    )
                )
    return found


def _real_subject(fam: Family, stem: str, files: dict[str, str], messages: dict[str, str]) -> str:
    """The template's real subject line, as a template in its syntax ("" if none known)."""
    if fam.subject_file:
        return files.get(f"{fam.prefix}{stem.removesuffix('_body')}_subject.txt", "")
    if fam.subject_key:  # Keycloak: password-reset -> passwordResetSubject, else shorter
        words = re.split(r"[-_]", stem)
        for end in range(len(words), 0, -1):
            camel = words[0] + "".join(w[:1].upper() + w[1:] for w in words[1:end])
            key = camel + fam.subject_key
            if key in messages:
                args = ", ".join("subjectArg" for _ in re.findall(r"\{\d\}", messages[key]))
                return f'${{msg("{key}"{", " if args else ""}{args})}}'
        return ""
    return dict(fam.subjects).get(stem, "")
