"""Every setting the documentation names is one Loom reads: its TOML examples load as
written, and each ``LOOM_<SECTION>__<FIELD>`` variable and `` `[section] field` `` it
mentions names a field of that section (the loader refuses unknown ones at start-up, so a
renamed setting left in the docs would stop the server of whoever copies it)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from server.config import CLIENT_SECTIONS, load_settings
from tests.markdown import blocks

ROOT = Path(__file__).resolve().parents[3]
DOCS = sorted(
    {
        ROOT / "README.md",
        ROOT / "docker-compose.yml",
        ROOT / "Dockerfile",
        *ROOT.glob("docs/**/*.md"),
        *ROOT.glob("clients/**/README.md"),
        *ROOT.glob("deploy/**/*.md"),
        *ROOT.glob("deploy/**/*.yaml"),
        *ROOT.glob("deploy/**/*.tpl"),
    }
)
ENV_NAME = re.compile(r"LOOM_([A-Z0-9]+)__([A-Z0-9_]+)")
INLINE = re.compile(r"`\[([a-z_]+)\] ([a-z0-9_]+)`")
EXPECTED_TOML = 4
"""TOML blocks in the documentation. Change it with the docs: a block dropped from the
extraction (a fence renamed) fails here instead of going unchecked."""


def _toml_blocks() -> list[tuple[str, str]]:
    return [
        (f"{path.relative_to(ROOT)}:{b.line}", b.code)
        for path in DOCS
        for b in blocks(path.read_text(encoding="utf-8"))
        if b.language == "toml"
    ]


TOML_BLOCKS = _toml_blocks()


def _known() -> dict[str, set[str]]:
    """Each settings section's field names; the client sections' variables as their
    command reads them (`loom probe`'s, from its source)."""
    defaults = load_settings(env={})
    known = {
        section.name: {f.name for f in dataclasses.fields(getattr(defaults, section.name))}
        for section in dataclasses.fields(defaults)
        if dataclasses.is_dataclass(getattr(defaults, section.name))
    }
    probe = (ROOT / "server" / "probe.py").read_text(encoding="utf-8")
    for section in CLIENT_SECTIONS:
        known[section] = {
            m.group(2).lower() for m in ENV_NAME.finditer(probe) if m.group(1).lower() == section
        }
    return known


def _named(text: str) -> list[tuple[str, str, str]]:
    """(as written, section, field) of every setting `text` names."""
    found = [(m.group(0), m.group(1).lower(), m.group(2).lower()) for m in ENV_NAME.finditer(text)]
    found += [(m.group(0), m.group(1), m.group(2)) for m in INLINE.finditer(text)]
    return [f for f in found if f[0] != "LOOM_SECTION__FIELD"]  # the pattern itself


def _unknown(text: str, known: dict[str, set[str]]) -> list[str]:
    """The settings `text` names, as written, that are no field of their section."""
    return [w for w, section, name in _named(text) if name not in known.get(section, set())]


def test_every_toml_block_is_found() -> None:
    assert len(TOML_BLOCKS) == EXPECTED_TOML, [where for where, _ in TOML_BLOCKS]


@pytest.mark.parametrize(("where", "block"), TOML_BLOCKS, ids=[w for w, _ in TOML_BLOCKS])
def test_a_toml_example_loads_as_written(where: str, block: str, tmp_path: Path) -> None:
    config = tmp_path / "loom.toml"
    config.write_text(block, encoding="utf-8")
    load_settings(config, env={})  # raises on an unknown section or setting, or a bad value


def test_every_setting_the_docs_name_exists() -> None:
    known = _known()
    wrong = [
        f"{path.relative_to(ROOT)}: {written}"
        for path in DOCS
        for written in _unknown(path.read_text(encoding="utf-8"), known)
    ]
    assert wrong == []


def test_a_misnamed_setting_is_caught() -> None:
    """The check above reads what it should: a renamed field and an unknown section are
    found in a text naming them, the real names are not."""
    text = "`[server] tls_cert_file`, LOOM_SERVER__TLS_CERT, LOOM_SERVE__PORT, `[templates] k`"
    assert _unknown(text, _known()) == [
        "LOOM_SERVER__TLS_CERT",
        "LOOM_SERVE__PORT",
        "`[templates] k`",
    ]
