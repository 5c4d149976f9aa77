"""Sibling packs: senders that send many different emails in one shared layout.

A held-out evaluation showed clustering merging *sibling* templates (one sender's receipt,
password reset, welcome, digest... in one layout). These packages add five such senders,
pinned and checked exactly like `email_sources` (which reads them; see
`loadtest/corpora/README.md`):

==================  ========  =============  ============  ==================================
package             registry  licence        language      templates
==================  ========  =============  ============  ==================================
weblate             PyPI      GPL-3.0+       Django        translation-platform mail (one base)
Misago              PyPI      GPL-2.0        Django        forum account and thread mail
django-helpdesk     PyPI      BSD-3-Clause   Django        ticket mail (fixture + one base)
pocketbase          Go proxy  MIT            Go template   auth mail (Go constants + layout)
nodebb              npm       GPL-3.0        Benchpress    forum mail (fragments + footer)
==================  ========  =============  ============  ==================================

GPL packages are test material only: nothing of them is committed or linked, their
templates are read as text, and their licence text is checked like the others'.
Two packs keep their templates in code rather than one file each; `READERS` turns them
into templates the renderer understands, as their senders' code assembles them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from loadtest.corpora.email_model import Family, Package, SourceTemplate

__all__ = ["PACKS", "READERS"]

_HELPDESK_BASE = "helpdesk/en/email_html_base.html"
_PB = "github.com/pocketbase/pocketbase@v0.36.8/"
_GPL = "GNU GENERAL PUBLIC LICENSE"


def _trans(text: str) -> str:
    return '{% trans "' + text + '" %}'


_MISAGO_SUBJECTS = (  # the subjects Misago's views send these with (its own strings)
    ("register/complete", _trans("Welcome on %(forum_name)s forums!")),
    ("register/inactive", _trans("Welcome on %(forum_name)s forums!")),
    ("activation/by_admin", _trans("Your account on %(forum_name)s forums has been activated")),
    ("activation/by_user", _trans("Activate %(user)s account on %(forum_name)s forums")),
    ("change_password_form_link", _trans("Change %(user)s password on %(forum_name)s forums")),
    ("change_password", _trans("Confirm password change on %(forum_name)s forums")),
    ("change_email", _trans("Confirm e-mail change on %(forum_name)s forums")),
    ("data_download", _trans("%(user)s, your data download is ready")),
    ("thread/reply", _trans("%(thread)s - new reply by %(user)s")),
    (
        "privatethread/added",
        _trans('%(user)s has invited you to participate in private thread "%(thread)s"'),
    ),
)

_NODEBB_SUBJECTS = (  # the subjects NodeBB's code sends these with (its catalogue's keys)
    ("welcome", "[[email:welcome-to, {site_title}]]"),
    ("registration_accepted", "[[email:welcome-to, {site_title}]]"),
    ("reset", "[[email:password-reset-requested, {site_title}]]"),
    ("reset_notify", "[[email:reset.notify.subject]]"),
    ("digest", "[{site_title}] [[email:digest.subject, {date}]]"),
    ("invitation", "[[email:invite, {site_title}]]"),
    ("notif_chat", "[[email:notif.chat.subject, {username}]]"),
    ("notif_post", "{subject}"),
)

PACKS = (
    Package(
        "pypi",
        "weblate",
        "5.14.3",
        "sha256:0bc2c5a49ebc496758e89f08d5ec9d1b226e8aba2cff7744a18ab9f235dca816",
        "GPL-3.0-or-later",
        "weblate-5.14.3.dist-info/licenses/LICENSE",
        _GPL,
        (
            Family(
                "weblate",
                "noreply@weblate-hosted.example",
                "django",
                "weblate/templates/mail/",
                "weblate/templates/",
                exclude=(r"^(base|billing_check_line|shared-.*)\.html$",),
                subject_file=True,
            ),
        ),
    ),
    Package(
        "pypi",
        "Misago",
        "0.39.6",
        "sha256:57152ffa4d5d567803594b49163a7b399e93fab438f99ab4a463459936eb9f00",
        "GPL-2.0",
        "misago-0.39.6.dist-info/licenses/LICENSE.rst",
        "GNU General Public License",
        (
            Family(
                "misago",
                "forum@misago-board.example",
                "django",
                "misago/templates/misago/emails/",
                "misago/templates/",
                exclude=(r"^base\.html$",),
                recursive=True,
                subjects=_MISAGO_SUBJECTS,
            ),
        ),
    ),
    Package(
        "pypi",
        "django-helpdesk",
        "2.6.1",
        "sha256:f2167cd340577088be861fa5d25ca6f828226ac0d25db7e67b96a35a89ca4e44",
        "BSD-3-Clause",
        "django_helpdesk-2.6.1.dist-info/licenses/LICENSE",
        "Redistribution and use in source and binary forms",
        (
            Family(
                "helpdesk",
                "support@helpdesk-desk.example",
                "django",
                "helpdesk/fixtures/emailtemplate.json",
                "helpdesk/templates/",
                reader="helpdesk",
            ),
        ),
    ),
    Package(
        "go",
        "github.com/pocketbase/pocketbase",
        "v0.36.8",
        "sha256:83cdf6652a191ddfb581a093da1504c2d12ad62ef3ab95a64f6bc9f7b6e6af53",
        "MIT",
        _PB + "LICENSE.md",
        "Permission is hereby granted, free of charge",
        (
            Family(
                "pocketbase",
                "noreply@pocketbase-app.example",
                "go",
                _PB + "core/collection_model_auth_templates.go",
                extra_roots=(_PB + "mails/templates/",),
                reader="pocketbase",
            ),
        ),
    ),
    Package(
        "npm",
        "nodebb",
        "1.4.0",
        "sha512-G/QGMcGx4pg57Pl/ZxAjimHsP4GN/6IwyV22Mha0utPqMs3vD6OTAHpYWgXtimrbkbhppFV9RMZ/5MNFQ+tj9w==",
        "GPL-3.0",
        "package/LICENSE",
        _GPL,
        (
            Family(
                "nodebb",
                "forum@nodebb-community.example",
                "benchpress",
                "package/src/views/emails/",
                "package/src/views/",
                exclude=(r"^test\.tpl$",),
                messages="package/public/language/en-GB/email.json",
                subjects=_NODEBB_SUBJECTS,
            ),
        ),
    ),
)


def _helpdesk(
    fam: Family, files: dict[str, str], shared: dict[str, str], _: dict[str, str], package: str
) -> list[SourceTemplate]:
    """django-helpdesk keeps each mail in a fixture row (heading, HTML, subject) and sends
    it as ``{% extends base %}{% block title %}heading{% block content %}html`` with the
    subject ``{{ ticket.ticket }} {{ ticket.title|safe }} <subject>`` (its defaults)."""
    out = []
    for row in json.loads(files[fam.prefix]):
        f = row.get("fields", {})
        if f.get("locale") not in (None, "", "en") or not f.get("html"):
            continue
        source = (
            f"{{% extends '{_HELPDESK_BASE}' %}}{{% block title %}}{f['heading']}{{% endblock %}}"
            f"{{% block content %}}{f['html']}{{% endblock %}}"
        )
        subject = "{{ ticket.ticket }} {{ ticket.title|safe }} " + f.get("subject", "")
        out.append(
            SourceTemplate(
                fam.family, f["template_name"], fam.sender, source, shared, fam.syntax, {},
                package, subject,
            )
        )  # fmt: skip
    return out


def _go_strings(expr: str, consts: dict[str, str]) -> str:
    """The value of a Go constant expression: string literals and constants joined by +."""
    out = []
    for m in re.finditer(r'"((?:\\.|[^"\\])*)"|`([^`]*)`|(\w+)', expr):
        if m.group(1) is not None:
            out.append(json.loads(f'"{m.group(1)}"'))
        elif m.group(2) is not None:
            out.append(m.group(2))
        else:
            out.append(consts.get(m.group(3), ""))
    return "".join(out)


def _pocketbase(
    fam: Family, files: dict[str, str], shared: dict[str, str], _: dict[str, str], package: str
) -> list[SourceTemplate]:
    """PocketBase's default auth mails are Go values (subject and body with ``{APP_NAME}``
    placeholders) put into its layout's ``{{template "content" .}}``."""
    code = files[fam.prefix]
    consts = {m.group(1): m.group(2) for m in re.finditer(r'(\w+)\s+string\s*=\s*"([^"]*)"', code)}
    found = re.search(r"const Layout = (`[^`]*`)", shared["layout.go"])
    if found is None:
        raise RuntimeError(f"{package}: mails/templates/layout.go has no Layout")
    layout = _go_strings(found.group(1), consts)

    def go_template(text: str) -> str:
        return re.sub(r"\{([A-Z][A-Z_:]*)\}", r"{{.\1}}", text)

    out = []
    pattern = r"var default(\w+)Template = EmailTemplate\{\s*Subject:(.*?),\s*Body:(.*?),\s*\}"
    for m in re.finditer(pattern, code, re.S):
        name = re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", m.group(1)).lower()
        body = go_template(_go_strings(m.group(3), consts))
        out.append(
            SourceTemplate(
                fam.family, name, fam.sender, layout, {"content": body}, fam.syntax, {}, package,
                go_template(_go_strings(m.group(2), consts)),
            )
        )  # fmt: skip
    return out


Reader = Callable[
    [Family, dict[str, str], dict[str, str], dict[str, str], str], list[SourceTemplate]
]
READERS: dict[str, Reader] = {"helpdesk": _helpdesk, "pocketbase": _pocketbase}
"""(family, archive files by path, shared files by name, catalogue, package) -> templates."""
