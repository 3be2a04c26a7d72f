"""Sphinx extension for the dyckbook: the profile a build shows, no duplicate inline scripts, and
the tables of what the package declares (``{dyckbook-declared} positions``: read from the
declaration at every build, so a new encoding, mask, readout or negative kind reaches the docs
with nothing else edited)."""

from __future__ import annotations

import json
import posixpath
import shutil
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

DATA_DIR = "_data"  # where the built site keeps the runs' data files the pages link to
INDEX = Path("book") / "pages" / "index.json"  # written by `dyckbook pages` (dyckbook.pages)
#: the profile whose numbers are the book's (the Makefile's default PROFILE): a build of any
#: other says so under every page's title
BOOK_PROFILE = "cpu"


def _dedupe_scripts(app: Any, pagename: str, templatename: str, context: dict,
                    doctree: Any) -> None:
    # sphinx-thebe registers its inline configuration script once per build phase under
    # jupyter-book, so pages declared `const THEBE_JS_URL` twice and browsers raised a
    # SyntaxError on every page. Keep the first copy of each identical script.
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple[str, str]] = set()
    unique = []
    for js in scripts:
        # inline scripts are registered with filename None or "": compare by body
        filename = getattr(js, "filename", js) or ""
        key = (str(filename), str(getattr(js, "attributes", {}).get("body", "")))
        if key in seen:
            continue
        seen.add(key)
        unique.append(js)
    context["script_files"] = unique


def _inline(text: str) -> list[nodes.Node]:
    """``text`` with its `backticked` parts as literals (a manifest's description is Markdown)."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: the text as it is
        return [nodes.Text(text)]
    return [nodes.literal(text=p) if i % 2 else nodes.Text(p) for i, p in enumerate(parts) if p]


def _under_title(doctree: nodes.document, note: nodes.Element) -> None:
    section = next(doctree.findall(nodes.section), None)
    if section is None:
        doctree.insert(0, note)
    else:
        section.insert(section.first_child_matching_class(nodes.title) + 1, note)


def _profile_note(app: Any, doctree: nodes.document, docname: str) -> None:
    """Under the landing page's title: which manifest profile made the numbers of this build;
    under every other page's, when that is not the book's profile (:data:`BOOK_PROFILE`),
    that its numbers are that profile's."""
    index = Path(app.srcdir) / INDEX
    if not index.is_file():
        return
    built = json.loads(index.read_text(encoding="utf-8"))
    para = nodes.paragraph()
    if docname != app.config.root_doc:
        if built["profile"] == BOOK_PROFILE:
            return
        para += nodes.Text("The numbers on this page come from the profile ")
        para += nodes.literal(text=built["profile"])
        para += nodes.Text(", not the book's (")
        para += nodes.literal(text=BOOK_PROFILE)
        summary = str(built.get("description", "")).split(":")[0].split(". ")[0].rstrip(".")
        para += nodes.Text(")" + (": " if summary else "."))
        para.extend(_inline(f"{summary}." if summary else ""))
        _under_title(doctree, nodes.note("", para, classes=["build-profile", "page-profile"]))
        return
    para += nodes.Text("This build's numbers come from the profile ")
    para += nodes.literal(text=built["profile"])
    para += nodes.Text(f" of notebooks/experiments.yml ({len(built['runs'])} runs).")
    marked = sorted(name for name, state in built.get("states", {}).items() if state != "ok")
    if marked:
        para += nodes.Text(f" {len(marked)} of its pages {'is' if len(marked) == 1 else 'are'} "
                           f"not up to date, each marked on the page: {', '.join(marked)}.")
    note = nodes.note("", para, classes=["build-profile"])
    if built.get("description"):  # folded: on a phone the question comes first
        about = nodes.paragraph()
        about.extend(_inline(built["description"]))
        note += nodes.raw("", "<details><summary>What the profile is</summary>", format="html")
        note += about
        note += nodes.raw("", "</details>", format="html")
    _under_title(doctree, note)


def _provenance(app: Any, doctree: nodes.document, docname: str) -> None:
    """Under a run's page's title, where its numbers come from (``pages.provenance``: commit,
    package and results version, machine, wall time, date, registration); on the landing page,
    a table of every published run with the same."""
    index = Path(app.srcdir) / INDEX
    if not index.is_file():
        return
    known = json.loads(index.read_text(encoding="utf-8")).get("provenance", {})
    name = docname.rsplit("/", 1)[-1]
    if docname.startswith("book/pages/") and name in known:
        para = nodes.paragraph("", "", nodes.Text(known[name]["text"]))
        box = nodes.container("", para, classes=["provenance"])
        files = [f for f in known[name].get("files", []) if (Path(app.srcdir) / f).is_file()]
        if files:
            links = nodes.paragraph("", "", nodes.Text("Its data: "))
            for i, f in enumerate(files):
                links += nodes.Text(", " if i else "")
                uri = posixpath.relpath(f"{DATA_DIR}/{f}", posixpath.dirname(docname))
                links += nodes.reference("", f.split("/", 4)[-1], refuri=uri)
            links += nodes.Text(". A record's test strings are a function of its configuration "
                                "and seed: ")
            links += nodes.literal(text="dyckbook.make_splits(RunConfig.from_dict(record"
                                        "['config']).data, seed)")
            links += nodes.Text(" makes them again.")
            box += links
        _under_title(doctree, box)
    elif docname == app.config.root_doc and known:
        head = ("run", "commit", "finished", "machine", "republish", "compute",
                "judged against")
        rows = [(run, p.get("commit") or "—", str(p.get("finished") or "—")[:16].replace("T", " "),
                 p.get("machine") or "—", _duration(p.get("wall_s")),
                 _duration(p.get("compute_s")),
                 f"registration {p['registration']}" if (p.get("registration") or "").isdigit()
                 else p.get("registration") or "—")
                for run, p in sorted(known.items()) if p.get("finished")]
        table, group = nodes.table(classes=["provenance-table"]), nodes.tgroup(cols=len(head))
        table += group
        group.extend(nodes.colspec(colwidth=1) for _ in head)
        group += nodes.thead("", nodes.row("", *[nodes.entry("", nodes.paragraph(text=h))
                                                 for h in head]))
        group += nodes.tbody("", *[nodes.row("", *[nodes.entry("", nodes.paragraph(text=str(c)))
                                                   for c in row]) for row in rows])
        section = nodes.section(ids=["provenance-of-every-run"])
        section += nodes.title(text="Where every number comes from")
        section += nodes.paragraph(text="Each published run of this build: the commit that "
                                   "computed it (+: with uncommitted changes), when it "
                                   "finished, the machine, the time its last run took "
                                   "(republish: a run resumed from its records or a cache "
                                   "retrains nothing), what its models' training took "
                                   "(compute: what a recompute from nothing costs) and, for a "
                                   "run whose results judge a claim, the registration "
                                   "they are judged against (every page repeats its own under "
                                   "its title; the verdict chapter lists every registration).")
        section += table
        doctree.append(section)


def _copy_data(app: Any, error: Exception | None) -> None:
    """Copy every run's data files (``pages.data_files``, listed in the index) into the built
    site under :data:`DATA_DIR`, where the pages' links point."""
    index = Path(app.srcdir) / INDEX
    if error is not None or app.builder.format != "html" or not index.is_file():
        return
    known = json.loads(index.read_text(encoding="utf-8")).get("provenance", {})
    for f in sorted({f for p in known.values() for f in p.get("files", [])}):
        source = Path(app.srcdir) / f
        if source.is_file():
            target = Path(app.outdir) / DATA_DIR / f
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)


def _duration(seconds: Any) -> str:
    """7.3 s, 66.6 min, 1.7 h; an em dash where nothing is recorded."""
    from dyckbook.pipeline.pages import duration_text

    return "—" if seconds is None else duration_text(seconds)


def _always_reread(app: Any, env: Any, added: set, changed: set, removed: set) -> list[str]:
    # the notes depend on index.json, which Sphinx does not track: the landing page's always,
    # every page's when the build is not the book's profile; the declarations' tables depend on
    # the package, which Sphinx does not track either: the pages that show one, always
    declaring = sorted(doc for doc in env.found_docs
                       if "dyckbook-declared" in _source_text(app, env, doc))
    index = Path(app.srcdir) / INDEX
    if not index.is_file():
        return declaring
    if json.loads(index.read_text(encoding="utf-8"))["profile"] == BOOK_PROFILE:
        return sorted({app.config.root_doc, *declaring})
    return sorted(env.found_docs)


def _source_text(app: Any, env: Any, doc: str) -> str:
    path = Path(env.doc2path(doc))
    return path.read_text(encoding="utf-8") if path.suffix == ".md" and path.is_file() else ""


def declared_rows(what: str) -> list[list[str]]:
    """The table of a declaration, header first: ``positions``, ``masks``, ``readouts`` or
    ``negative-kinds``."""
    if what == "positions":
        from dyckbook.nn.options import POSITIONS

        yes = {True: "yes", False: "no"}
        return [["`pos_encoding`", "what it adds", "extends past the training lengths",
                 "inside attention", "made for length", "a decoder reads it"]] + [
            [f"`{p.name}`", p.description, yes[p.extends], yes[p.relative],
             yes[p.for_length], yes[p.decodable]] for p in POSITIONS.values()]
    if what in ("masks", "readouts"):
        from dyckbook.nn import options

        table = options.MASK_DECLARATION if what == "masks" else options.READOUT_DECLARATION
        head = "what a query sees" if what == "masks" else "what the decision reads"
        return [[f"`{what[:-1]}`", head]] + [[f"`{k}`", v] for k, v in table.items()]
    if what == "negative-kinds":
        from dyckbook.data.negatives import NEGATIVE_KINDS

        return [["kind", "what is wrong", "from k", "shortest", "long-range", "guarantees"]] + [
            [f"`{k.name}`", k.description, str(k.min_k), str(k.min_length),
             "yes" if k.long_range else "no", k.guarantees] for k in NEGATIVE_KINDS.values()]
    raise ValueError(f"dyckbook-declared takes positions, masks, readouts or negative-kinds, "
                     f"got {what!r}")


PROSE = {"what it adds", "what a query sees", "what the decision reads", "what is wrong",
         "guarantees"}


def declared_table(rows: list[list[str]]) -> nodes.table:
    """A docutils table of ``rows`` (header first), `backticked` parts as literals."""
    table = nodes.table(classes=["dyckbook-declared", "colwidths-given"])
    group = nodes.tgroup(cols=len(rows[0]))
    table += group
    # prose columns (a description, the guarantees) wide, the short facts narrow
    group += [nodes.colspec(colwidth=4 if head in PROSE else 1) for head in rows[0]]
    for part, chunk in ((nodes.thead(), rows[:1]), (nodes.tbody(), rows[1:])):
        for cells in chunk:
            row = nodes.row()
            for cell in cells:
                row += nodes.entry("", nodes.paragraph("", "", *_inline(cell)))
            part += row
        group += part
    return table


class DeclaredTable(SphinxDirective):
    """``{dyckbook-declared} positions``: the declaration's table."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        return [declared_table(declared_rows(self.arguments[0]))]


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("dyckbook-declared", DeclaredTable)
    app.connect("html-page-context", _dedupe_scripts)
    app.connect("doctree-resolved", _profile_note)
    app.connect("doctree-resolved", _provenance)
    app.connect("env-get-outdated", _always_reread)
    app.connect("build-finished", _copy_data)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
