"""A page's marks (dyckbook.pipeline.pages and the book's Sphinx extension): a stand-in for a
run never published keeps the labels other pages refer to, a never-run page is not "rerun",
and a build of a profile that is not the book's says so under every page's title."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document

from dyckbook.pipeline import pages, runner

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "book" / "_ext"))
import dyckbook_sphinx  # noqa: E402


def test_a_stand_in_keeps_every_label_of_its_notebook():
    """Issue 54: a partly published profile failed `jupyter-book build -W` on
    `undefined label: 'ch-dyck'`: the stand-in of an unpublished chapter held only its title."""
    manifest = runner.load_manifest()
    sources = {nb.key: nb.path.read_bytes() for nb in manifest.notebooks.values()}
    defined = {label for source in sources.values() for label, _ in pages.targets(source)}
    referred = {m for path in [*REPO.glob("book/*.md"), *REPO.glob("book/*.ipynb"),
                               *REPO.glob("notebooks/*.ipynb")]
                for m in re.findall(r"\{(?:ref|numref)\}`(?:[^`<]*<)?([^`>]+)>?`",
                                    path.read_text())}
    md = {m for path in REPO.glob("book/*.md")
          for m in re.findall(r"^\(([^)\s]+)\)=", path.read_text(), re.M)}
    assert referred <= defined | md and "ch-dyck" in defined
    for key, source in sources.items():
        stand_in = pages.marked_page(None, key, ":::{warning}\nNot published.\n:::\n", source)
        kept = pages.targets(stand_in.encode())
        assert [label for label, _ in kept] == [label for label, _ in pages.targets(source)]
        nb = nbformat.reads(stand_in, as_version=4)
        assert nb.cells[0].source.endswith(f"# {key}") and "run-state" in nb.cells[1].metadata[
            "tags"]
    chapter = pages.marked_page(None, "Dyck languages", None,
                                (REPO / "book" / "dyck_languages.ipynb").read_bytes())
    cells = nbformat.reads(chapter, as_version=4).cells
    assert cells[0].source == "(ch-dyck)=\n# Dyck languages"
    assert cells[1].source.startswith("(sec-dyck-negatives)=\n## ")


def test_a_page_never_published_is_run_not_rerun():
    record = {"status": "failed", "finished": "2026-11-27T10:00:00", "error": {}}
    never = pages.banner(name="dyck1", made_by="smoke", status="failed", record=record,
                         profile="smoke", has_page=False, error="boom")
    assert "--only dyck1` runs it" in never and "reruns" not in never
    stale = pages.banner(name="dyck1", made_by="smoke", status="stale", record=record,
                         profile="smoke")
    assert "--only dyck1` reruns it" in stale


def _note(tmp_path: Path, profile: str, docname: str, description: str = "") -> str:
    index = tmp_path / dyckbook_sphinx.INDEX
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_text(json.dumps({"profile": profile, "description": description,
                                 "runs": {"a": {}}, "states": {"a": "ok"}}))
    app = SimpleNamespace(srcdir=str(tmp_path), config=SimpleNamespace(root_doc="index"))
    doctree = new_document("page", get_default_settings(Parser))
    Parser().parse("Title\n=====\n\nText.\n", doctree)
    dyckbook_sphinx._profile_note(app, doctree, docname)
    notes = list(doctree.findall(nodes.note))
    assert len(notes) <= 1
    if notes:  # under the title
        section = next(doctree.findall(nodes.section))
        assert section.index(notes[0]) == 1
    return notes[0].astext() if notes else ""


def test_a_build_of_another_profile_says_so_under_every_pages_title(tmp_path: Path):
    """Issue 54: only the landing page said a build was a preview; the verdict chapter of a
    smoke build stated verdicts from 1 seed without a word."""
    smoke = ("A preview, not the book's results: every page end to end. Its numbers decide "
             "nothing; the book's are profile cpu (`make book`).")
    page = _note(tmp_path, "smoke", "book/pages/chapters/re_examining_thesis", smoke)
    assert page == ("The numbers on this page come from the profile smoke, not the book's "
                    "(cpu): A preview, not the book's results.")
    assert _note(tmp_path, "cpu", "book/pages/chapters/re_examining_thesis", "x") == ""
    landing = _note(tmp_path, "smoke", "index", smoke)
    assert landing.startswith("This build's numbers come from the profile smoke")
    assert "`" not in landing and "(make book)" in landing  # Markdown code, not raw backticks
    # issue 65: at 375 px the note filled 1.5 screens before the question; the description is
    # folded into a <details>, the visible line names the profile only
    visible, folded = landing.split("<details>", 1)
    assert "A preview" not in visible and len(visible) < 120
    assert "A preview" in folded.split("</details>")[0]
    assert dyckbook_sphinx.BOOK_PROFILE == re.search(
        r"^PROFILE \?= (\S+)$", (REPO / "Makefile").read_text(), re.M).group(1)


def _landing_table(tmp_path: Path, known: dict) -> list[list[str]]:
    index = tmp_path / dyckbook_sphinx.INDEX
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_text(json.dumps({"profile": "cpu", "runs": {}, "provenance": known}))
    app = SimpleNamespace(srcdir=str(tmp_path), config=SimpleNamespace(root_doc="index"))
    doctree = new_document("index", get_default_settings(Parser))
    Parser().parse("Title\n=====\n\nText.\n", doctree)
    dyckbook_sphinx._provenance(app, doctree, "index")
    table = next(doctree.findall(nodes.table))
    return [[entry.astext() for entry in row.findall(nodes.entry)]
            for row in table.findall(nodes.row)]


def test_a_resumed_run_shows_its_compute_time_beside_its_republish_time(tmp_path):
    """Issue 65 items 4 and 8: a run republished from its records (seconds) or a cache shows
    what its models' training took beside it, in the landing table and in `dyckbook list`,
    with its commit, machine and registration."""
    record = {"commit": "b93c136c2574", "dyckbook": "0.1.0", "results_version": 1,
              "finished": "2026-12-07T12:36:31+00:00", "machine": "Intel Xeon, 2 cores",
              "duration_s": 6.9, "longest_s": 3995.6}
    folder = tmp_path / "resumed"
    folder.mkdir()
    (folder / "records.jsonl").write_text("".join(json.dumps(
        {"label": label, "config": {"data": {"k": 3}}, "seconds": 5000.0, "steps": 1}) + "\n"
        for label in ("a", "b")))
    said = pages.provenance(record, folder)
    assert said["wall_s"] == 6.9 and said["compute_s"] == 10000.0  # its groups, one worker
    assert pages.provenance(record)["compute_s"] == 3995.6  # its longest run
    assert pages.provenance({**record, "longest_s": None})["compute_s"] == 6.9
    assert pages.provenance({})["compute_s"] is None
    rows = _landing_table(tmp_path, {"generalisation": pages.provenance(record, folder),
                                     "never": pages.provenance({})})
    head, *body = rows
    assert head == ["run", "commit", "finished", "machine", "republish", "compute",
                    "judged against"]
    assert body == [["generalisation", "b93c136c2574", "2026-12-07 12:36", "Intel Xeon, 2 cores",
                     "6.9 s", "2.8 h", "—"]]
    assert [pages.duration_text(t) for t in (6.9, 3995.6, 10000.0)] == ["6.9 s", "66.6 min",
                                                                          "2.8 h"]


def test_every_page_says_where_its_numbers_come_from(tmp_path):
    """Issue 51: the commit and package version that computed a run, its results version, the
    date, the machine and the wall time, from its run.json; what is missing says so."""
    import subprocess

    from dyckbook.pipeline import pages

    record = {"commit": "0123456789ab", "dyckbook": "0.1.0", "results_version": 1,
              "finished": "2026-11-28T11:26:40+00:00", "machine": "AMD EPYC, 2 cores",
              "duration_s": 227.1, "device": None}
    said = pages.provenance(record)
    assert said["text"] == ("Computed by dyckbook 0.1.0 at commit 0123456789ab (results version "
                            "1) on AMD EPYC, 2 cores in 3.8 min, finished 2026-11-28 11:26:40 "
                            "UTC.")
    assert pages.provenance({})["text"] == (  # a run never computed: one sentence
        "This run has not been computed: no run of it is recorded.")
    assert "at commit not recorded" in pages.provenance({"finished": "2026"})["text"]
    assert "at commit 0123456789ab with uncommitted changes (results" in pages.provenance(
        {**record, "commit": "0123456789ab+"})["text"]
    assert "(cuda:0)" in pages.provenance({**record, "device": "cuda:0"})["text"]
    assert pages.provenance({**record, "device": "cpu"})["text"] == said["text"]
    assert pages.provenance({**record, "longest_s": 300.0})["text"] == said["text"]
    assert "in 3.8 min (resumed; its longest run took 104.7 min), finished" in pages.provenance(
        {**record, "longest_s": 6279.6})["text"]  # a rerun from its records says so
    # models resumed from a cache: the records' training groups took longer than the run
    folder = tmp_path / "resumed"
    folder.mkdir()
    lines = [{"label": label, "config": {"data": {"k": 3}}, "seconds": seconds, "steps": 100}
             for label, seconds in (("a", 3000.0), ("a", 3000.0), ("b", 2000.0))]
    (folder / "records.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert "in 3.8 min (resumed; its models' training took 83.3 min)," \
        in pages.provenance(record, folder)["text"]  # the seeds of group a share its 3,000 s
    assert pages.provenance({**record, "params": {"workers": 25}}, folder)["text"] == said["text"]
    # its longest run took longer than its groups over its workers: that run trained them
    assert "in 3.8 min (resumed; its longest run took 104.7 min), finished" in pages.provenance(
        {**record, "longest_s": 6279.6, "params": {"workers": 2}}, folder)["text"]
    assert ("(resumed; its longest run took 10.0 min; its models' training took 41.7 min)"
            ) in pages.provenance(  # 5,000 s of groups over its 2 workers
        {**record, "longest_s": 600.0, "params": {"workers": 2}}, folder)["text"]
    # workers 0: one per core of the machine its run.json names
    assert "its models' training took 41.7 min)" in pages.provenance(
        {**record, "longest_s": 600.0, "params": {"workers": 0}}, folder)["text"]
    assert pages.provenance(record, tmp_path / "no such folder")["text"] == said["text"]
    # the registration its claims are judged against, or why they are not (issue 51 item 4)
    from dyckbook.claims import registry

    run, params = registry.verdict_runs()[0], {"n_seeds": 10}
    fixed = registry.Registration(1, "2026-11-28T10:00:00Z", "cpu", run, registry.claims_of(run),
                                  registry.digest(run, params), registry.recipe.recipe(params))
    judged = {**record, "run": run, "profile": "cpu", "params": params}
    said = pages.provenance(judged, None, [fixed])
    assert said["registration"] == "1" and said["text"].endswith(
        f"Its claims ({', '.join(fixed.claims)}) are judged against registration 1 of "
        "2026-11-28 10:00:00 UTC, which fixed its recipe before it ran.")
    carried = registry.Registration(2, "2026-12-07T10:00:00Z", "cpu", run, fixed.claims,
                                    fixed.digest, fixed.recipe, "carried", of=1)
    said_carried = pages.provenance(judged, None, [fixed, carried])
    assert said_carried["registration"] == "1" and (
        "registration 1 of 2026-11-28 10:00:00 UTC (its key carried over to the one rule of "
        "issue 66 as registration 2)") in said_carried["text"]
    changed = pages.provenance({**judged, "params": {"n_seeds": 3}}, None, [fixed])
    assert changed["registration"] == "not judged"
    assert "Its claims are not judged: run `" in changed["text"] and "registration 1)" in \
        changed["text"]
    early = pages.provenance({**judged, "finished": "2026-11-28T09:00:00+00:00"}, None, [fixed])
    assert early["registration"] == "not judged" and "before its registration 1" in early["text"]
    assert "not judged" in pages.provenance({**judged, "profile": "smoke"}, None, [fixed])["text"]
    unjudged = pages.provenance({**record, "run": "summary"}, None, [fixed])  # feeds no claim
    assert unjudged["registration"] is None and "registration" not in unjudged["text"]
    said = pages.provenance(record)
    compacted = pages.provenance({**record, "compacted": [
        {"on": "2026-11-29T10:00:00+00:00", "commit": "abcdef012345"},
        {"on": "2026-11-30T10:00:00+00:00", "commit": "fedcba", "by": "dyckbook compact: "
         "records of 1048576 bytes or more gzip-compressed (values unchanged)"}]})["text"]
    assert compacted == said["text"] + (
        " Its records were rewritten by `dyckbook compact` on 2026-11-29 (commit abcdef012345; "
        "a compact form; values unchanged). Its records were rewritten by `dyckbook compact` on "
        "2026-11-30 (commit fedcba; records of 1 MiB or more gzip-compressed; values "
        "unchanged).")  # each pass says what it did
    assert pages.machine().endswith(" cores")
    assert pages.source_commit(tmp_path) is None  # not a checkout
    git = ["git", "-C", str(tmp_path), "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "dyckbook").mkdir()
    (tmp_path / "dyckbook" / "x.py").write_text("x = 1\n")
    (tmp_path / "book" / "runs" / "cpu").mkdir(parents=True)
    (tmp_path / "book" / "chapter.ipynb").write_text("{}")
    (tmp_path / "book" / "runs" / "cpu" / "page.ipynb").write_text("{}")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    clean = pages.source_commit(tmp_path)
    assert len(clean) == 12 and not clean.endswith("+")
    # a page published by an earlier run and not yet committed is not the code: still clean
    (tmp_path / "book" / "runs" / "cpu" / "page.ipynb").write_text('{"new": 1}')
    assert pages.source_commit(tmp_path) == clean
    (tmp_path / "book" / "chapter.ipynb").write_text('{"edited": 1}')  # a chapter is
    assert pages.source_commit(tmp_path) == clean + "+"
    subprocess.run([*git, "checkout", "-q", "--", "book/chapter.ipynb"], check=True)
    (tmp_path / "dyckbook" / "x.py").write_text("x = 2\n")  # computed from an edited tree
    assert pages.source_commit(tmp_path) == clean + "+"


# ----------------------------------------------------------------- the committed cpu pages
def _page_outputs() -> dict[str, str]:
    """Every committed run notebook's outputs (what its page's reader sees: ``dyckbook pages``
    copies them into book/pages), as one text each."""
    out = {}
    for path in sorted((REPO / "book" / "runs" / "cpu").rglob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        parts = []
        for cell in cells:
            for o in cell.get("outputs", []):
                parts.append("".join(o.get("text", "")))
                for mime, data in o.get("data", {}).items():
                    if mime.startswith("text/") or mime.endswith("markdown"):
                        parts.append(data if isinstance(data, str) else "".join(data))
        out[path.relative_to(REPO).as_posix()] = "\n".join(parts)
    return out


#: "mean [low, high]" as the pages print it: 0.123 [0.100, 0.150], 91.3% [85.0, 97.6]
SHOWN_INTERVAL = re.compile(r"(?<![\w.\-])(-?\d+(?:\.\d+)?)%?\s*\[(-?\d+(?:\.\d+)?)%?,\s*"
                            r"(-?\d+(?:\.\d+)?)%?\]")


def test_every_mean_on_a_committed_page_lies_in_its_interval():
    """Issue 64: a page showed "-0.001 [0.000, 0.001]". Rounding is monotone, so a mean inside
    its interval stays inside once all three are rounded alike."""
    outputs = _page_outputs()
    assert len(outputs) >= 15
    seen, outside = 0, []
    for page, text in outputs.items():
        for m in SHOWN_INTERVAL.finditer(text):
            mean, lo, hi = (float(g) for g in m.groups())
            seen += 1
            if not lo <= mean <= hi:
                outside.append(f"{page}: {m.group(0)}")
    assert seen > 100 and not outside, outside
    assert SHOWN_INTERVAL.fullmatch("-0.001 [0.000, 0.001]")  # the pattern reads the old cell


def test_no_committed_page_shows_a_machine_path():
    """Issue 64: no page shows a machine's folders (a run cache's absolute path, a temporary
    folder, a ``PosixPath``), in any committed run's output."""
    from test_book import MACHINE_PATH

    pages = _page_outputs()
    assert len(pages) >= 20  # every committed run page is read
    showing = {page: MACHINE_PATH.search(text).group(0) for page, text in pages.items()
               if MACHINE_PATH.search(text)}
    assert not showing, showing


def test_every_page_links_its_data_and_the_site_carries_it(tmp_path):
    """Issue 64: a download link on every page to its committed records. The links point where
    the build copies the files (``_data/`` beside the pages), relative to the page."""
    folder = tmp_path / "book" / "results" / "cpu" / "01_dyck1" / "dyck1"
    (folder / "references").mkdir(parents=True)
    (tmp_path / "book" / "results" / "cpu" / "01_dyck1" / ".dyck1.attempt").mkdir()
    for name in ("records.jsonl", "records.baselines.jsonl", "run.json", "fig.png",
                 "model.pt", "references/records.jsonl", "../.dyck1.attempt/records.jsonl"):
        (folder / name).write_text("{}\n")
    record = {"commit": "b93c136c2574", "finished": "2026-12-07T12:36:31+00:00"}
    said = pages.provenance(record, folder)
    base = "book/results/cpu/01_dyck1/dyck1"
    assert said["files"] == [f"{base}/records.baselines.jsonl", f"{base}/records.jsonl",
                             f"{base}/references/records.jsonl", f"{base}/run.json"]
    assert pages.provenance({})["files"] == []
    index = tmp_path / dyckbook_sphinx.INDEX
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_text(json.dumps({"profile": "cpu", "runs": {}, "provenance": {"dyck1": said}}))
    app = SimpleNamespace(srcdir=str(tmp_path), outdir=str(tmp_path / "html"),
                          config=SimpleNamespace(root_doc="index"),
                          builder=SimpleNamespace(format="html"))
    doctree = new_document("dyck1", get_default_settings(Parser))
    Parser().parse("Title\n=====\n\nText.\n", doctree)
    dyckbook_sphinx._provenance(app, doctree, "book/pages/01_dyck1/dyck1")
    links = {r.astext(): r["refuri"] for r in doctree.findall(nodes.reference)}
    assert links["dyck1/records.jsonl"] == f"../../../_data/{base}/records.jsonl"
    assert len(links) == 4 and "make_splits" in doctree.astext()
    dyckbook_sphinx._copy_data(app, None)
    page_dir = tmp_path / "html" / "book" / "pages" / "01_dyck1"
    for uri in links.values():
        assert (page_dir / uri).resolve().is_file(), uri


#: the landing page's headings that state a finding in words, each with the verdicts it
#: rests on (claim -> the labels under which the heading stays true)
LANDING_HEADINGS = {
    "**Beyond the training lengths: part of the way to twice the length, not to four times.**":
        {"lengths_2x_k3": {"qualified"}, "lengths_4x_k3": {"reproduced"}},
}


def test_the_landing_pages_words_agree_with_the_published_verdicts():
    """A heading that answers in words is true of the committed verdicts (glued numbers follow
    the records by themselves; words do not): a rerun that moves a verdict fails here until
    the heading is rewritten."""
    root = Path(__file__).resolve().parents[1]
    landing = (root / "book" / "intro.md").read_text(encoding="utf-8")
    published = json.loads((root / "book" / "results" / "cpu" / "chapters" / "re_examining_thesis"
                            / "verdicts.json").read_text(encoding="utf-8"))
    for heading, needs in LANDING_HEADINGS.items():
        assert heading in landing, f"the landing page no longer says {heading!r}: update the test"
        for claim, labels in needs.items():
            assert published.get(claim, {}).get("label") in labels, (heading, claim,
                                                                       published.get(claim))
