"""The held-out packs bench reads each pack's checkout as its repository lays it out."""

from __future__ import annotations

from pathlib import Path

from loadtest.benches.templates_heldout import held_out_templates


def _write(root: Path, rel: str, text: str) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def test_each_layout_or_theme_is_one_sender_and_source(tmp_path: Path) -> None:
    pm, swu, mg = tmp_path / "pm", tmp_path / "swu", tmp_path / "mg"
    for layout in ("basic", "plain"):
        for name in ("welcome", "receipt", "example"):
            _write(pm, f"templates-inlined/{layout}/{name}/content.html", "<p>{{name}}</p>")
        _write(pm, f"templates/{layout}/welcome/content.html", "not inlined: not read")
    _write(swu, "templates/go/confirm.html", "<p>Confirm</p>")
    _write(swu, "templates/go/images/logo.png", "")
    _write(mg, "templates/inlined/alert.html", "<p>Alert</p>")
    _write(mg, "templates/alert.html", "not inlined: not read")
    sg = tmp_path / "sg"
    _write(sg, "paste-templates/receipt.html", "<p>Receipt</p>")
    _write(sg, "paste-templates/base.html", "the blank layout: not a template")
    _write(sg, "dynamic-templates/receipt/receipt.html", "<p>{{total}}</p>")
    got = held_out_templates(pm, swu, mg, sg)
    assert sorted((t.package, t.name, t.syntax) for t in got) == [
        ("mailgun", "alert", "static"),
        ("postmark-basic", "receipt", "handlebars"),
        ("postmark-basic", "welcome", "handlebars"),
        ("postmark-plain", "receipt", "handlebars"),
        ("postmark-plain", "welcome", "handlebars"),
        ("sendgrid-dynamic", "receipt", "handlebars"),
        ("sendgrid-paste", "receipt", "static"),
        ("sendwithus-go", "confirm", "static"),
    ]
    assert len({t.sender for t in got}) == 6
    assert all(t.label == f"{t.package}/{t.name}" for t in got)
    assert held_out_templates(None, None, None) == []
