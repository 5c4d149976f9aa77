"""Stored forms of emails and templates, and the keyed recipient hash."""

from __future__ import annotations

from server.templates.model import (
    ClusterEmail,
    TemplateValue,
    decode_cluster_email,
    decode_templates,
    encode_cluster_email,
    encode_templates,
    recipient_hash,
)


class TestModel:
    def test_round_trips_and_recipient_hash(self) -> None:
        """Stored forms decode to what was encoded; the recipient hash is keyed."""
        e = ClusterEmail("u", "s@x", "subj", (("/p[0]", "hi"),), 5)
        assert decode_cluster_email(encode_cluster_email(e)) == e
        t = TemplateValue("id", "s", (1,), 5, 6, "other", ("a",), "", (), 9, "loom", ("a",))
        assert decode_templates(encode_templates([t])) == [t]
        assert recipient_hash("bob", b"k1") != recipient_hash("bob", b"k2")
        assert "bob" not in recipient_hash("bob", b"k1")

    def test_version_one_templates_still_decode(self) -> None:
        """Templates stored by version 1 (rules [xpath, type]) decode to legacy rules; new
        ones are written as version 2 with the spans' places."""
        import json

        import zstandard

        from server.templates.model import TEMPLATES_VERSION, FieldRuleValue

        v1 = [1, [["id", "s", [1], 5, 6, "other", ["a"], "", [["/p[0]", "date"]], 9, "loom", []]]]
        (t,) = decode_templates(zstandard.ZstdCompressor().compress(json.dumps(v1).encode()))
        assert t.field_rules == (FieldRuleValue("/p[0]", "date"),)
        assert t.field_rules[0].legacy
        assert TEMPLATES_VERSION == 2
        stored = json.loads(zstandard.ZstdDecompressor().decompress(encode_templates([t])))
        assert stored[0] == 2
        assert decode_templates(encode_templates([t])) == [t]

    def test_threads_encode_and_decode_side_by_side(self) -> None:
        """Four threads encoding and decoding at once (the event loop beside a thread pool)
        each get back what was encoded. One zstd context shared between threads corrupted
        rows and crashed the process, so the threads run in a child: a crash is a failure
        with its signal, not the end of the suite."""
        import subprocess
        import sys
        from pathlib import Path

        child = """
import threading
from server.templates.model import ClusterEmail, encode_cluster_email, decode_cluster_email
e = ClusterEmail("u", "s@x", "subj", tuple(("/p", f"text {i} " * 20) for i in range(50)), 1)
blob = encode_cluster_email(e)
wrong = []
def work():
    for _ in range(2000):
        if decode_cluster_email(blob) != e or decode_cluster_email(encode_cluster_email(e)) != e:
            wrong.append(1)
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(wrong))
"""
        done = subprocess.run(
            [sys.executable, "-c", child],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=Path(__file__).resolve().parents[3],
        )
        assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
        assert done.stdout.split() == ["0"]
