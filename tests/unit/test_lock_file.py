"""`requirements.lock` (what the image installs with ``--require-hashes``) against pyproject.

A dependency added to or changed in pyproject.toml without ``make lock`` fails here, not in
an image build: every runtime dependency must be pinned in the lock, with its hashes, at a
version pyproject allows. The server's dependencies include loom-client, this repository's
own distribution (clients/python): its dependencies are locked, itself is not (the image
installs it from the tree).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"
LOCAL = "loom-client"
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)(?P<options>.*)$")
_HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}\b")


@dataclass(frozen=True)
class Pin:
    version: Version
    hashes: int


def _project(root: Path) -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((root / "pyproject.toml").read_text("utf-8"))["project"]
    return project


def _runtime() -> list[Requirement]:
    """The server's runtime dependencies and loom-client's, loom-client itself left out."""
    server = [Requirement(text) for text in _project(ROOT)["dependencies"]]
    client = [Requirement(text) for text in _project(CLIENT)["dependencies"]]
    return [r for r in server + client if canonicalize_name(r.name) != LOCAL]


def _dev() -> list[Requirement]:
    return [Requirement(text) for text in _project(ROOT)["optional-dependencies"]["dev"]]


def _lock() -> dict[str, Pin]:
    """The lock's pins by canonical name (continuation lines joined, comments dropped)."""
    text = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    logical = re.sub(r"\\\n", " ", text)
    pins: dict[str, Pin] = {}
    for raw in logical.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _PIN.match(line)
        assert match, f"not an exact pin: {line[:80]!r}"
        name = canonicalize_name(match["name"])
        assert name not in pins, f"{name} pinned twice"
        pins[name] = Pin(Version(match["version"]), len(_HASH.findall(match["options"])))
    return pins


def test_every_runtime_dependency_is_pinned_with_hashes_at_an_allowed_version() -> None:
    """Each of pyproject's `dependencies` is in the lock, hashed, at a version its specifier
    allows (what a reviewer checks after editing pyproject and running `make lock`)."""
    pins = _lock()
    for requirement in _runtime():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} is not in requirements.lock: run make lock"
        pin = pins[name]
        assert pin.hashes >= 1, f"{name} has no --hash in requirements.lock"
        assert requirement.specifier.contains(pin.version, prereleases=True), (
            f"requirements.lock pins {name}=={pin.version}, pyproject wants {requirement}"
        )


def test_the_server_depends_on_the_client_of_its_own_version() -> None:
    """The server imports loom.v1 from loom-client: the two are released together."""
    client = _project(CLIENT)
    wanted = [
        Requirement(text)
        for text in _project(ROOT)["dependencies"]
        if canonicalize_name(Requirement(text).name) == LOCAL
    ]
    assert [str(r.specifier) for r in wanted] == [f"=={client['version']}"]


def test_the_local_client_is_not_in_the_lock() -> None:
    """loom-client is built from clients/python: a pin would make the image fetch whatever an
    index serves under that name (and --require-hashes would refuse the local build)."""
    assert LOCAL not in _lock()


def test_every_pin_is_hashed_so_pip_require_hashes_accepts_the_file() -> None:
    """pip --require-hashes refuses the whole file if one pin lacks a hash."""
    assert [name for name, pin in _lock().items() if pin.hashes == 0] == []


def test_extras_are_locked_too() -> None:
    """A dependency's extras (PyJWT[crypto]: cryptography) are pinned as well, read from the
    installed distribution's metadata."""
    pins = _lock()
    for requirement in _runtime():
        declared = [Requirement(text) for text in metadata.requires(requirement.name) or []]
        for extra in requirement.extras:
            needed = [d for d in declared if d.marker and d.marker.evaluate({"extra": extra})]
            assert needed, f"{requirement}: no requirements found for extra {extra!r}"
            for dependency in needed:
                assert canonicalize_name(dependency.name) in pins, (
                    f"{dependency.name} ({requirement}) is not in requirements.lock"
                )


def test_development_tools_stay_out_of_the_image() -> None:
    """The lock is the runtime set only: no test runner, linter or plotting library."""
    runtime = {canonicalize_name(r.name) for r in _runtime()}
    pins = _lock()
    leaked = [
        r.name
        for r in _dev()
        if canonicalize_name(r.name) in pins
        and canonicalize_name(r.name) not in runtime
        # numpy is dev (loadtest) but also what datasketches needs at run time
        and canonicalize_name(r.name) != "numpy"
    ]
    assert leaked == []
