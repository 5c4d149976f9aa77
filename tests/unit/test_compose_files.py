"""docker-compose.yml and the files it mounts stay in step with the code they copy."""

from __future__ import annotations

import re
from pathlib import Path

from storage.sql.schema import DEFAULT_SCHEMA

ROOT = Path(__file__).resolve().parents[2]


def test_the_postgres_init_schema_is_the_iterators_default_hierarchy() -> None:
    """The SQL the postgres image runs on its first start is storage/sql/schema.py's DDL."""
    sql = (ROOT / "deploy/compose/iterator-schema.sql").read_text()
    statements = [
        s.strip() for s in re.sub(r"^--.*$", "", sql, flags=re.MULTILINE).split(";") if s.strip()
    ]
    assert statements == list(DEFAULT_SCHEMA)


def test_every_image_is_named_in_full_and_built_here() -> None:
    """No short name for a registry to guess: every image is localhost/loom/NAME:TAG, and
    scripts/image/engines.sh (or the Makefile, for Loom's) builds exactly that tag."""
    compose = (ROOT / "docker-compose.yml").read_text()
    built = (ROOT / "scripts/image/engines.sh").read_text() + (ROOT / "Makefile").read_text()
    images = set(re.findall(r"^\s+image: (\S+)$", compose, flags=re.MULTILINE))
    assert len(images) == 6, images
    for image in images:
        assert re.fullmatch(r"localhost/loom/[a-z-]+:[\w.]+", image), image
        assert image in built, f"{image} is not built by scripts/image/engines.sh or make"
