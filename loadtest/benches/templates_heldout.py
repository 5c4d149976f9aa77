"""Template packs outside the corpus: ``python -m loadtest.benches.templates_heldout``.

The corpus's sources (`loadtest/corpora/README.md`) come from package registries, so the
suite can download them; the clustering's thresholds were chosen on them. This bench
measures the clustering on packs that were never part of that choice and are on no
registry: give it checkouts of their GitHub repositories (pinned commits and licences in
`loadtest/corpora/README.md`, "Held-out packs"). Every pack is a set of senders, each
sending several different emails in one layout (Postmark: 3 layouts x 10; sendwithus: 14
themes of 1-9; Mailgun: one sender's 3; SendGrid: 2 themes x 5 and 5 dynamic templates).

Each template is instantiated as the corpus instantiates its own (`build_corpus`, one
subject per sender: the subject tells no template from another), and the online service
is replayed in one process as `templates_loso` does, with the service's defaults and,
in the same run, with rule 4 of the split off (the side that cuts across templates waits)
and with the split rules of earlier releases (no cap on the own-text share, no rule 3, no
rule 4), per source and the worst. ``--names prefix|suffix`` puts each recipient's first
name before or after every template subject (`templates_loso.named`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from loadtest.benches.templates_loso import fingerprinted, named, replay
from loadtest.corpora.email_corpus import build_corpus
from loadtest.corpora.email_model import SourceTemplate
from server.templates.grouping import GroupingParams
from server.templates.schemes import SchemeParams

__all__ = ["held_out_templates", "main"]

SCHEMES = {
    "loom": SchemeParams(),
    "without rule 4 (cut_ratio 0)": SchemeParams(grouping=GroupingParams(cut_ratio=0.0)),
    "without the cap, rule 3 and rule 4": SchemeParams(
        grouping=GroupingParams(own_share_cap=0, own_over_shared=0.0, cut_ratio=0.0)
    ),
}


def held_out_templates(
    postmark: Path | None,
    sendwithus: Path | None,
    mailgun: Path | None,
    sendgrid: Path | None = None,
) -> list[SourceTemplate]:
    """The packs' templates, one source per sender (layout or theme)."""
    out: list[SourceTemplate] = []
    if postmark:  # templates-inlined/<layout>/<name>/content.html, Mustachio
        for f in sorted(postmark.glob("templates-inlined/*/*/content.html")):
            layout, name = f.parent.parent.name, f.parent.name
            if name != "example":  # the pack's blank starter, not an email
                out.append(_template(f"postmark-{layout}", name, f, "handlebars"))
    if sendwithus:  # templates/<theme>/<name>.html, static
        for f in sorted(sendwithus.glob("templates/*/*.html")):
            out.append(_template(f"sendwithus-{f.parent.name}", f.stem, f, "static"))
    if mailgun:  # templates/inlined/<name>.html, static
        for f in sorted(mailgun.glob("templates/inlined/*.html")):
            out.append(_template("mailgun", f.stem, f, "static"))
    if sendgrid:  # <theme>-templates/<name>.html static (base.html: the blank layout);
        # dynamic-templates/<use>/<name>.html Handlebars, each its own sender
        for f in sorted(sendgrid.glob("*-templates/*.html")):
            theme = f.parent.name.removesuffix("-templates")
            if theme != "dynamic" and f.stem != "base":
                out.append(_template(f"sendgrid-{theme}", f.stem, f, "static"))
        for f in sorted(sendgrid.glob("dynamic-templates/*/*.html")):
            out.append(_template("sendgrid-dynamic", f.stem, f, "handlebars"))
    return out


def _template(source: str, name: str, path: Path, syntax: str) -> SourceTemplate:
    return SourceTemplate(
        source,
        name,
        f"mail@{source}.example",
        path.read_text(errors="replace"),
        syntax=syntax,
        package=source,
    )


def main(argv: list[str] | None = None) -> None:
    """Replays every pack given under each scheme; prints and writes the report."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--postmark", type=Path, help="checkout of ActiveCampaign/postmark-templates"
    )
    parser.add_argument("--sendwithus", type=Path, help="checkout of sendwithus/templates")
    parser.add_argument(
        "--mailgun", type=Path, help="checkout of mailgun/transactional-email-templates"
    )
    parser.add_argument("--sendgrid", type=Path, help="checkout of sendgrid/email-templates")
    parser.add_argument("--names", choices=("prefix", "suffix"))
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    templates = held_out_templates(args.postmark, args.sendwithus, args.mailgun, args.sendgrid)
    if not templates:
        parser.error("no templates: give at least one pack's checkout")
    corpus = build_corpus(templates, subjects="sender")
    if args.names:
        corpus = named(corpus, args.names)
    parsed = fingerprinted(corpus)
    report: dict[str, object] = {"templates": len(templates), "k": args.k, "names": args.names}
    for name, params in SCHEMES.items():
        figures = replay(corpus, parsed, params, args.k)
        worst = min(figures, key=lambda s: figures[s].floor)
        met = sum(f.meets_aims for f in figures.values())
        report[name] = {
            "per_source": {s: vars(f) for s, f in sorted(figures.items())},
            "worst_source": worst,
            "sources_meeting_aims": met,
        }
        print(f"== {name}: aims met on {met} of {len(figures)} sources; worst {worst}")
        for s, f in sorted(figures.items()):
            print(
                f"{s:28s} P {f.precision:.3f}  R {f.recall:.3f}  "
                f"per true {f.templates_per_true:.2f}  unformed {f.unformed}"
                f"  ({f.true_templates} templates){'' if f.meets_aims else '  <'}"
            )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
