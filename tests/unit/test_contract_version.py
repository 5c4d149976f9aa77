"""The contract's version, its recorded release, and the retry policy all agree with protos/.

`make contract` runs `buf breaking` against `protos/contract/loom-v1.binpb`, which guards only
the files that recording holds; these checks make sure it holds every `.proto`, that
`protos/VERSION` is documented in the changelog, and that `clients/service_config.json`
retries exactly the RPCs whose contract comment says they are safe to retry.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "protos"
SEMVER = re.compile(r"(\d+)\.(\d+)\.(\d+)")
RPC = re.compile(r"((?:[ \t]*//[^\n]*\n)+)[ \t]*rpc (\w+)\(")
SERVICE = re.compile(r"^service (\w+) \{(.*?)^\}", re.MULTILINE | re.DOTALL)


def version() -> tuple[int, int, int]:
    text = (PROTOS / "VERSION").read_text(encoding="utf-8").strip()
    match = SEMVER.fullmatch(text)
    assert match, f"protos/VERSION is not MAJOR.MINOR.PATCH: {text!r}"
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def rpc_comments() -> dict[str, str]:
    """``loom.v1.Service/Method`` -> the comment above its ``rpc`` line."""
    found: dict[str, str] = {}
    for path in sorted((PROTOS / "loom" / "v1").glob("*.proto")):
        for service, body in SERVICE.findall(path.read_text(encoding="utf-8")):
            for comment, method in RPC.findall(body):
                found[f"loom.v1.{service}/{method}"] = comment
    return found


def safe_to_retry(comment: str) -> bool:
    return "safe to retry" in comment.lower()


def test_version_is_the_packages_major() -> None:
    """protos/VERSION is semantic, and its MAJOR is the package's: loom.v1 is 1.x.y."""
    major, _, _ = version()
    assert major == 1


def test_changelog_documents_the_version() -> None:
    """CHANGELOG.md has a section for the current VERSION."""
    changelog = (PROTOS / "CHANGELOG.md").read_text(encoding="utf-8")
    current = ".".join(map(str, version()))
    assert f"\n## {current}\n" in changelog


def test_the_recorded_release_covers_every_proto_file() -> None:
    """Every loom/v1/*.proto is in contract/loom-v1.binpb, so buf breaking guards all of it."""
    image = descriptor_pb2.FileDescriptorSet.FromString(
        (PROTOS / "contract" / "loom-v1.binpb").read_bytes()
    )
    recorded = {f.name for f in image.file if f.name.startswith("loom/")}
    present = {p.relative_to(PROTOS).as_posix() for p in (PROTOS / "loom").rglob("*.proto")}
    assert present == recorded, "run `make contract-baseline` with the release that adds a file"


def test_every_rpc_says_whether_it_is_safe_to_retry() -> None:
    """Each RPC's comment says "safe to retry" or "NOT idempotent", never both, never neither."""
    comments = rpc_comments()
    assert len(comments) > 20
    unclear = [
        method
        for method, text in comments.items()
        if safe_to_retry(text) == ("NOT idempotent" in text)
    ]
    assert not unclear


def test_the_service_config_retries_exactly_the_rpcs_safe_to_retry() -> None:
    """clients/service_config.json names every RPC once, with a retryPolicy iff its contract
    comment says it is safe to retry."""
    config = json.loads((ROOT / "clients" / "service_config.json").read_text(encoding="utf-8"))
    retried: dict[str, bool] = {}
    for group in config["methodConfig"]:
        for name in group["name"]:
            method = f"{name['service']}/{name['method']}"
            assert method not in retried, f"{method} is in two methodConfig groups"
            retried[method] = "retryPolicy" in group
    comments = rpc_comments()
    assert set(comments) == {m for m in retried if m.startswith("loom.v1.")}
    expected = {m: safe_to_retry(text) for m, text in comments.items()}
    assert expected == {m: r for m, r in retried.items() if m.startswith("loom.v1.")}
