"""Real template sources instantiated the way their sender's code instantiates them.

The corpus's real templates are written in six template languages: Handlebars (Ghost),
Django templates (django-oscar, Wagtail, Weblate, Misago, django-helpdesk), Jinja
(Flask-Security), Go's text/template (Gitea, PocketBase), FreeMarker (Keycloak) and
Benchpress (NodeBB). Each has its own tag syntax, but the same few
constructs: text, a value, a conditional chain, a loop, a named block or partial, a layout
that a template extends, and translated strings. One tokenizer per syntax turns a source
into the same tokens; one parser and one renderer do the rest:

- a **value** is a personal value typed by its variable's name (`values.value_for`);
- a **conditional** without an alternative is an *optional block*: kept with
  `Choices.optional` (0.8, so absent in about 20 % of instances); a chain with
  alternatives takes one branch at random;
- a **loop** is a *repeated block*: its body 1-`Choices.max_repeats` times (1-10);
- **layouts** (``extends`` + ``block``, Go's ``define``/``template``, FreeMarker's macro
  with ``<#nested>``) and **partials** are resolved through the source's files;
- **translations** come from the source's own catalogue (Gitea's locale JSON, Keycloak's
  message properties) or the literal in the tag (``{% trans "…" %}``, ``{{t '…'}}``,
  ``_fsdomain('…')``), their placeholders filled with typed values.

A renderer that does not understand a tag outputs nothing for it, so a real source never
fails to render; what each syntax understands is spelt out in its tokenizer. Every value
inserted is reported to `RenderContext.record` with the loop iterations it sits in (the
ground truth of field extraction).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SYNTAXES", "Choices", "RenderContext", "constructs", "render"]

Token = tuple[str, str]
"""(kind, payload): text, var, lit, open:<kind>, else, close, include, extends, define,
nested, skip."""


@dataclass(frozen=True)
class Choices:
    """How instances vary."""

    optional: float = 0.8
    """Probability that a conditional block without an alternative is present."""
    max_repeats: int = 10
    """A loop's body is repeated 1..max_repeats times."""


@dataclass
class RenderContext:
    """What one rendering needs besides the source."""

    rng: random.Random
    value: Callable[[str], str]
    """A personal (or per-sender constant) value for a variable's name."""
    files: Mapping[str, str] = field(default_factory=dict)
    """Partials, layouts and included templates of the source, by name."""
    messages: Mapping[str, str] = field(default_factory=dict)
    """The source's translation catalogue (key -> text with placeholders)."""
    choices: Choices = field(default_factory=Choices)
    record: Callable[[str, str, str], None] | None = None
    """Called with (variable name, value inserted, row) for every value the rendering
    inserts; the row is "" outside loops, else the iterations it is in, outermost first
    (``orders#1/items#2``; a loop met again in the same email is ``items~2#1``)."""


# ---------------------------------------------------------------- tokenizers

_PLACEHOLDER_NAME = re.compile(r"[A-Za-z_][\w]*")


def _name_of(expr: str) -> str:
    """The variable name an expression reads (``line.title|upper`` -> ``title``)."""
    expr = expr.split("|", 1)[0]
    paths = re.findall(r"[$.]?[A-Za-z_][\w.]*", expr)
    dotted = [p for p in paths if "." in p.strip(".$")] or [p for p in paths if p[0] in ".$"]
    chosen = (dotted or paths or ["value"])[-1]
    parts = [p for p in re.split(r"[.$]", chosen) if p and p not in ("String", "all")]
    return parts[-1] if parts else "value"


def _first_string(expr: str) -> str | None:
    m = re.search(r"""(['"])((?:\\.|(?!\1).)*)\1""", expr, re.DOTALL)
    return m.group(2).replace("\\'", "'").replace('\\"', '"') if m else None


def _tokens_django(source: str) -> list[Token]:
    """Django templates and Jinja: ``{% tag %}``, ``{{ value }}``, ``{# comment #}``."""
    out: list[Token] = []
    pos = 0
    for m in re.finditer(r"\{%-?\s*(.*?)\s*-?%\}|\{\{-?\s*(.*?)\s*-?\}\}|\{#.*?#\}", source, re.S):
        out.append(("text", source[pos : m.start()]))
        pos = m.end()
        stmt, expr = m.group(1), m.group(2)
        if expr is not None:
            literal = _first_string(expr) if re.match(r"\s*_\w*\s*\(|\s*gettext", expr) else None
            out.append(("lit", literal) if literal is not None else ("var", expr))
            continue
        if stmt is None:
            continue
        word, _, rest = stmt.partition(" ")
        if word == "if":
            out.append(("open:if", rest))
        elif word in ("elif", "else"):
            out.append(("else", rest))
        elif word == "empty":
            out.append(("else", ""))
        elif word == "for":
            out.append(("open:loop", rest))
        elif word == "block":
            out.append(("open:block", rest.split()[0]))
        elif word in (
            "blocktrans",
            "blocktranslate",
            "with",
            "autoescape",
            "spaceless",
            "filter",
            "localize",
            "language",
            "timezone",
            "verbatim",
        ):
            out.append(("open:with", rest))
        elif word == "plural":
            out.append(("else", ""))
        elif word in ("comment", "capture"):  # capture: assigned to a name, not output
            out.append(("open:skip", ""))
        elif word == "compress":
            out.append(("open:with", rest))
        elif word.startswith("end"):
            out.append(("close", word))
        elif word == "extends":
            out.append(("extends", _first_string(rest) or ""))
        elif word == "include":
            out.append(("include", _first_string(rest) or ""))
        elif word in ("trans", "translate"):
            out.append(("lit", _first_string(rest) or ""))
        elif word in ("url", "static", "absolute_static", "absoluteurl") and " as " not in rest:
            out.append(("var", "url"))
        else:  # load, set, csrf_token, "… as name" assignments: no output
            out.append(("skip", stmt))
    out.append(("text", source[pos:]))
    return out


def _tokens_handlebars(source: str) -> list[Token]:
    """Handlebars (Ghost): ``{{#if}}``, ``{{#each}}``, ``{{else}}``, ``{{> partial}}``,
    ``{{t '…'}}``, ``{{!-- --}}``, ``{{{raw}}}``."""
    out: list[Token] = []
    pos = 0
    for m in re.finditer(r"\{\{\{?(.*?)\}?\}\}", source, re.S):
        out.append(("text", source[pos : m.start()]))
        pos = m.end()
        value = m.group(1).strip().lstrip("~").rstrip("~").strip()
        if value.startswith("!"):
            continue
        if value.startswith("#"):
            head = value[1:].lstrip("*> ").split()
            helper = head[0] if head else ""
            if helper in ("if", "unless", "has"):
                out.append(("open:if", value))
            elif helper in ("each", "foreach"):
                out.append(("open:loop", value))
            elif helper == "inline" and len(head) > 1:  # {{#*inline "name"}}: a partial
                out.append(("open:define", head[1].strip("'\"")))
            elif value[1:].lstrip().startswith(">"):  # {{#> layout}}…{{/layout}}: a partial block
                out.append(("open:call", helper))
            else:  # with, partial blocks, inline definitions: their body, once
                out.append(("open:with", value))
        elif value.startswith("/"):
            out.append(("close", value))
        elif value == "else" or value.startswith("else "):
            out.append(("else", value))
        elif value.startswith(">"):
            name = value[1:].strip().split()[0].strip("'\"")
            out.append(("nested", "") if name == "@partial-block" else ("include", name))
        elif re.match(r"""t\s+['"]""", value):
            out.append(("lit", _first_string(value) or ""))
        else:
            out.append(("var", value))
    out.append(("text", source[pos:]))
    return out


def _tokens_go(source: str) -> list[Token]:
    """Go's text/template (Gitea): ``{{if}}``, ``{{else if}}``, ``{{range}}``,
    ``{{with}}``, ``{{end}}``, ``{{define}}``, ``{{template}}``, ``{{$x := …}}`` and the
    catalogue's ``.locale.Tr "key" args``."""
    out: list[Token] = []
    pos = 0
    for m in re.finditer(r"\{\{-?\s*(.*?)\s*-?\}\}", source, re.S):
        text = source[pos : m.start()]
        if m.group(0).startswith("{{-"):
            text = text.rstrip()
        out.append(("text", text))
        pos = m.end()
        if m.group(0).endswith("-}}"):
            while pos < len(source) and source[pos].isspace():
                pos += 1
        action = m.group(1).strip()
        word, _, rest = action.partition(" ")
        if action.startswith("/*"):
            continue
        if word == "if":
            out.append(("open:if", rest))
        elif word == "else":
            out.append(("else", rest))
        elif word == "range":
            out.append(("open:loop", rest))
        elif word == "with":
            out.append(("open:with", rest))
        elif word == "end":
            out.append(("close", "end"))
        elif word == "define":
            out.append(("open:define", _first_string(rest) or ""))
        elif word in ("template", "block"):
            out.append(("include", _first_string(rest) or ""))
            if word == "block":
                out.append(("open:skip", ""))
        elif re.match(r"\$\w*\s*:?=", action):
            out.append(("skip", action))
        elif ".Tr " in action or ".TrN " in action or action.startswith(("Tr ", "TrN ")):
            out.append(("tr", action))
        else:
            out.append(("var", action))
    out.append(("text", source[pos:]))
    return out


def _tokens_freemarker(source: str) -> list[Token]:
    """FreeMarker (Keycloak): ``<#if>``, ``<#elseif>``, ``<#else>``, ``<#list>``,
    ``<#macro>``/``<#nested>``, ``<@layout.macro>`` calls, ``${msg("key", args)}``."""
    out: list[Token] = []
    pos = 0
    pattern = r"<#--.*?-->|<#(\w+)\s*([^>]*?)/?>|</#(\w+)>|<@([\w.]+)[^>]*?>|</@[\w.]+>|\$\{(.*?)\}"
    for m in re.finditer(pattern, source, re.S):
        out.append(("text", source[pos : m.start()]))
        pos = m.end()
        directive, args, closing, call, expr = m.groups()
        if m.group(0).startswith("<#--"):
            continue
        if expr is not None:
            out.append(("msg", expr) if "msg(" in expr else ("var", expr))
        elif directive in ("if",):
            out.append(("open:if", args))
        elif directive in ("elseif", "else"):
            out.append(("else", args))
        elif directive in ("list", "items"):
            out.append(("open:loop", args))
        elif directive == "macro":
            out.append(("open:define", args.split()[0] if args.split() else ""))
        elif directive == "nested":
            out.append(("nested", ""))
        elif directive in ("assign", "sep") and not args.strip().endswith("="):
            out.append(("open:skip", "") if "=" not in args else ("skip", args))
        elif directive in ("outputformat", "compress", "noautoesc", "autoesc"):
            out.append(("open:with", args))
        elif closing is not None:
            out.append(("close", closing))
        elif call is not None:
            out.append(("open:call", call.split(".")[-1]))
        elif m.group(0).startswith("</@"):
            out.append(("close", "call"))
        elif directive == "import":  # its macros (rendered output: nothing)
            out.append(("include", _first_string(args) or ""))
        else:  # setting, ftl: no output
            out.append(("skip", m.group(0)))
    out.append(("text", source[pos:]))
    return out


def _closing_brackets(source: str, start: int) -> int:
    """The end of the ``[[…]]`` opening at `start` (nested ones included), or -1."""
    depth, i = 0, start
    while i < len(source) - 1:
        pair = source[i : i + 2]
        if pair == "[[":
            depth, i = depth + 1, i + 2
        elif pair == "]]":
            depth, i = depth - 1, i + 2
            if depth == 0:
                return i
        else:
            i += 1
    return -1


def _tokens_benchpress(source: str) -> list[Token]:
    """Benchpress (NodeBB 1.x): ``<!-- IF x -->``, ``<!-- ELSE -->``, ``<!-- ENDIF x -->``,
    ``<!-- BEGIN list -->``/``<!-- END list -->``, ``<!-- IMPORT file -->``, ``{value}``
    and the catalogue's ``[[namespace:key, args]]`` (args may nest)."""
    out: list[Token] = []
    pos = 0
    pattern = re.compile(
        r"<!--\s*(IF|ELSE|ENDIF|BEGIN|END|IMPORT)\b\s*(.*?)\s*-->|\[\[|\{([\w.:]+)\}"
    )
    while (m := pattern.search(source, pos)) is not None:
        out.append(("text", source[pos : m.start()]))
        pos = m.end()
        word, rest, var = m.groups()
        if m.group(0) == "[[":
            end = _closing_brackets(source, m.start())
            if end < 0:
                out.append(("text", "[["))
                continue
            out.append(("bp", source[m.start() : end]))
            pos = end
        elif var is not None:
            out.append(("var", var))
        elif word == "IF":
            out.append(("open:if", rest))
        elif word == "ELSE":
            out.append(("else", ""))
        elif word == "BEGIN":
            out.append(("open:loop", rest))
        elif word in ("ENDIF", "END"):
            out.append(("close", word))
        else:
            out.append(("include", rest))
    out.append(("text", source[pos:]))
    return out


SYNTAXES: dict[str, Callable[[str], list[Token]]] = {
    "django": _tokens_django,
    "jinja": _tokens_django,
    "handlebars": _tokens_handlebars,
    "go": _tokens_go,
    "freemarker": _tokens_freemarker,
    "benchpress": _tokens_benchpress,
}


# ---------------------------------------------------------------- parser

Node = tuple[Any, ...]  # ("text", s) | ("var", e) | ("lit", s) | ("tr", e) | ("msg", e) | ("bp", s)
# | ("if", branches) | ("loop", expr, body) | ("with", body) | ("block", name, body) | ("define", name, body)
# | ("call", name, body) | ("include", name) | ("extends", name) | ("nested",)


def _parse(tokens: list[Token]) -> list[Node]:
    root: list[Node] = []
    # Each frame: (kind, arg, branches: list of bodies, current body)
    stack: list[tuple[str, str, list[list[Node]]]] = [("root", "", [root])]
    for kind, payload in tokens:
        branches = stack[-1][2]
        body = branches[-1]
        if kind.startswith("open:"):
            stack.append((kind[5:], payload, [[]]))
        elif kind == "else":
            branches.append([])
        elif kind == "close":
            if len(stack) == 1:
                continue  # a stray closing tag: ignored
            frame, arg, done = stack.pop()
            parent = stack[-1][2][-1]
            if frame == "if":
                parent.append(("if", done))
            elif frame == "loop":
                parent.append(("loop", arg, done[0]))
            elif frame in ("block", "define", "call"):
                parent.append((frame, arg, done[0]))
            elif frame == "with":
                parent.append(("with", done[0]))
            # skip: dropped
        elif kind in ("text", "var", "lit", "tr", "msg", "bp", "include", "extends"):
            body.append((kind, payload))
        elif kind == "nested":
            body.append(("nested",))
    while len(stack) > 1:  # unclosed blocks: keep what they hold
        frame, arg, done = stack.pop()
        stack[-1][2][-1].extend(done[0])
    return root


# ---------------------------------------------------------------- renderer


def _go_args(action: str) -> list[str]:
    """The arguments after a Tr/TrN key: parenthesised groups and plain words."""
    return re.findall(r"\([^)]*\)|[^\s()]+", action)


class _Renderer:
    def __init__(self, ctx: RenderContext, syntax: str) -> None:
        self.ctx = ctx
        self.syntax = syntax
        self.blocks: dict[str, list[Node]] = {}
        self.defines: dict[str, list[Node]] = {}
        self.depth = 0
        self.rows: list[str] = []
        self.loops: dict[str, int] = {}

    def value(self, name: str) -> str:
        """A value for `name`, recorded with the loop iterations it is in."""
        got = self.ctx.value(name)
        if self.ctx.record is not None:
            self.ctx.record(name, got, "/".join(self.rows))
        return got

    def _loop_label(self, expr: str) -> str:
        """The loop's list name, numbered when the same loop is met again in this email."""
        if self.syntax in ("django", "jinja"):
            expr = expr.split(" in ", 1)[-1]
        elif self.syntax == "handlebars":
            expr = " ".join(expr.split()[1:2])
        elif self.syntax == "go":
            expr = expr.split(":=", 1)[-1]
        elif self.syntax == "freemarker":
            expr = expr.split(" as ", 1)[0]
        name = _name_of(expr)
        key = "/".join(self.rows) + "/" + name
        self.loops[key] = self.loops.get(key, 0) + 1
        return name if self.loops[key] == 1 else f"{name}~{self.loops[key]}"

    def template(self, source: str) -> str:
        nodes = _parse(SYNTAXES[self.syntax](source))
        self._collect(nodes)
        parent = next((n[1] for n in nodes if n[0] == "extends"), None)
        while parent is not None and parent in self.ctx.files and self.depth < 8:
            self.depth += 1
            parent_nodes = _parse(SYNTAXES[self.syntax](self.ctx.files[parent]))
            self._collect(parent_nodes, override=False)
            nodes = parent_nodes
            parent = next((n[1] for n in nodes if n[0] == "extends"), None)
        return self.nodes(nodes, None)

    def _collect(self, nodes: list[Node], *, override: bool = True) -> None:
        """Registers blocks (the child's win over its layout's) and definitions."""
        for n in nodes:
            if n[0] == "block":
                if override or n[1] not in self.blocks:
                    self.blocks.setdefault(n[1], n[2])
                self._collect(n[2], override=override)
            elif n[0] == "define":
                self.defines.setdefault(n[1], n[2])
                self._collect(n[2], override=override)
            elif n[0] in ("with", "loop", "call"):  # their body is last
                self._collect(n[-1], override=override)
            elif n[0] == "if":
                for branch in n[1]:
                    self._collect(branch, override=override)

    def nodes(self, nodes: list[Node], nested: list[Node] | None) -> str:
        return "".join(self.node(n, nested) for n in nodes)

    def node(self, n: Node, nested: list[Node] | None) -> str:
        kind = n[0]
        ctx = self.ctx
        if kind == "text":
            return n[1]
        if kind == "var":
            return self.value(_name_of(n[1]))
        if kind == "lit":
            return self._literal(n[1])
        if kind == "tr":
            return self._translate_go(n[1])
        if kind == "msg":
            return self._translate_freemarker(n[1])
        if kind == "bp":
            return self._translate_benchpress(n[1])
        if kind == "if":
            branches = n[1]
            if len(branches) == 1:
                keep = ctx.rng.random() < ctx.choices.optional
                return self.nodes(branches[0], nested) if keep else ""
            return self.nodes(ctx.rng.choice(branches), nested)
        if kind == "loop":
            times = ctx.rng.randint(1, ctx.choices.max_repeats)
            label = self._loop_label(n[1])
            out = []
            for i in range(times):
                self.rows.append(f"{label}#{i + 1}")
                try:
                    out.append(self.nodes(n[2], nested))
                finally:
                    self.rows.pop()
            return "".join(out)
        if kind == "with":
            return self.nodes(n[1], nested)
        if kind == "block":
            body: list[Node] = self.blocks[n[1]] if n[1] in self.blocks else n[2]
            return self.nodes(body, nested)
        if kind == "define":
            return ""
        if kind == "call":
            macro = self.defines.get(n[1])
            if macro is None and n[1] in ctx.files and self.depth < 8:
                macro = _parse(SYNTAXES[self.syntax](ctx.files[n[1]]))
            return self.nodes(macro, n[2]) if macro is not None else self.nodes(n[2], nested)
        if kind == "nested":
            return self.nodes(nested or [], None)
        if kind == "include":
            return self._include(n[1], nested)
        return ""

    def _include(self, name: str, nested: list[Node] | None) -> str:
        if name in self.defines:
            return self.nodes(self.defines[name], nested)
        source = self.ctx.files.get(name)
        if source is None or self.depth >= 8:
            return ""
        self.depth += 1
        try:
            nodes = _parse(SYNTAXES[self.syntax](source))
            self._collect(nodes, override=False)  # an imported file's macros
            return self.nodes(nodes, nested)
        finally:
            self.depth -= 1

    def _literal(self, text: str) -> str:
        """A literal from the tag: ``%(name)s`` and ``{name}`` placeholders filled."""
        text = re.sub(r"%\((\w+)\)s", lambda m: self.value(m.group(1)), text)
        return re.sub(r"\{(\w+)\}", lambda m: self.value(m.group(1)), text)

    def _translate_go(self, action: str) -> str:
        words = _go_args(action)
        keys = [w for w in words if w.startswith('"')]
        if not keys:
            return ""
        plural = any(w.endswith(".TrN") or w == "TrN" for w in words)
        key = keys[-1] if plural and len(keys) > 1 else keys[0]
        after = words[words.index(keys[-1]) + 1 :] if keys else []
        text = self.ctx.messages.get(key.strip('"'), "")
        return self._fill_printf(text, after)

    def _fill_printf(self, text: str, args: list[str]) -> str:
        """Go's fmt verbs (``%s``, ``%d``, ``%[2]s``) filled from typed values of `args`
        (each drawn once; only those a verb inserts are recorded)."""
        names = [_name_of(a) for a in args] or ["value"]
        values = [self.ctx.value(name) for name in names]
        counter = iter(range(1000))

        def one(m: re.Match[str]) -> str:
            index = (int(m.group(1)) - 1 if m.group(1) else next(counter)) % len(values)
            if self.ctx.record is not None:
                self.ctx.record(names[index], values[index], "/".join(self.rows))
            return values[index]

        return re.sub(r"%(?:\[(\d+)\])?[sdvq]", one, text)

    def _translate_freemarker(self, expr: str) -> str:
        m = re.search(r"msg\(\s*(\"[^\"]*\"|[\w.]+)\s*(.*?)\)\s*\)?", expr, re.S)
        if m is None:
            return ""
        key = m.group(1)
        if not key.startswith('"'):
            return self.value(_name_of(key))
        text = self.ctx.messages.get(key.strip('"'), "")
        args = [a.strip() for a in re.split(r",(?![^(]*\))", m.group(2)) if a.strip()]

        def one(g: re.Match[str]) -> str:
            index = int(g.group(1))
            return self.value(_name_of(args[index])) if index < len(args) else ""

        return re.sub(r"\{(\d+)\}", one, text).replace("''", "'")

    def _translate_benchpress(self, text: str) -> str:
        """``[[namespace:key, arg, …]]``: the catalogue's text, ``%1``… filled from the
        args (``{value}``, a nested ``[[…]]`` or literal text)."""
        inner = text[2:-2]
        args, depth, start = [], 0, 0
        for i, ch in enumerate(inner):
            depth += (ch == "[") - (ch == "]")
            if ch == "," and depth == 0:
                args.append(inner[start:i].strip())
                start = i + 1
        args.append(inner[start:].strip())
        key = self._benchpress_text(args[0]).split(":", 1)[-1]
        filled = [self._benchpress_text(a) for a in args[1:]]
        template = self.ctx.messages.get(key, "")
        return re.sub(
            r"%(\d+)",
            lambda m: filled[int(m.group(1)) - 1] if int(m.group(1)) <= len(filled) else "",
            template,
        )

    def _benchpress_text(self, arg: str) -> str:
        return "".join(
            self.node(n, None)
            for n in _parse(_tokens_benchpress(arg))
            if n[0] in ("text", "var", "bp")
        )


def render(source: str, syntax: str, ctx: RenderContext) -> str:
    """One instance of `source` (written in `syntax`), its choices drawn from `ctx.rng`.

    Ghost's send-time replacements (``%%{name}%%``, filled per member by its mailer) are
    filled with values too.
    """
    renderer = _Renderer(ctx, syntax)
    html = renderer.template(source)
    return re.sub(r"%%\{(\w+)\}%%", lambda m: renderer.value(m.group(1)), html)


def constructs(source: str, syntax: str, files: Mapping[str, str]) -> set[str]:
    """Which of ``loop`` (a repeated block) and ``if`` (an optional or alternative block)
    a rendering of `source` can reach, through its layouts, partials and includes."""
    found: set[str] = set()
    seen: set[str] = set()

    def walk(nodes: list[Node]) -> None:
        for n in nodes:
            if n[0] in ("loop", "if"):
                found.add(n[0])
            if n[0] in ("include", "extends", "call") and n[1] in files and n[1] not in seen:
                seen.add(n[1])
                walk(_parse(SYNTAXES[syntax](files[n[1]])))
            for part in n[1:]:
                if isinstance(part, list):
                    if part and isinstance(part[0], list):
                        for branch in part:
                            walk(branch)
                    else:
                        walk(part)

    walk(_parse(SYNTAXES[syntax](source)))
    return found
