"""A run's page in the book: the executed notebook made into a page, and the warning it carries
when it is not up to date.

The runner stores each profile's pages in ``book/runs/<profile>/`` and never changes a stored
page after a failed attempt; ``dyckbook pages --profile P`` (``make book`` runs it) copies one
profile's pages into ``book/pages/`` (what ``_toc.yml`` lists), each marked here with its state,
and writes a page saying what happened for a run never published, keeping the labels other
pages refer to, so the book always builds.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import nbformat

from dyckbook.claims import registry
from dyckbook.pipeline.layout import training_seconds

__all__ = ["DATA_SUFFIXES", "STATES", "banner", "data_files", "machine", "marked_page",
           "prepare_for_book", "provenance", "source_commit", "targets"]

#: what a page in each state says under its title (``{when}``: when its publication finished)
STATES = {
    "stale": "**Stale.** The notebook, its parameters, the results version or the results it "
             "reads changed after this run published ({when}): these are its last results, not "
             "the current code's.",
    "edited": "**Edited.** A result file of this run changed after it published ({when}).",
    "failed": "**Its last run failed**{attempt}: {error}. The results below are the last good "
              "ones, published {when}.",
    "blocked": "**Not rerun**{attempt}: a run it reads failed. The results below are the "
               "last good ones, published {when}.",
    "missing": "**Not published.** Run `{name}` of profile `{profile}` has no results yet.",
}


def prepare_for_book(notebook: bytes, *, name: str, source: str, params: Mapping[str, Any],
                     profile: str, chapter: bool, several: bool,
                     hidden: Iterable[str] = ()) -> bytes:
    """An executed notebook made into a page: parameter cells removed, the run's parameters
    (but ``hidden``) in a dropdown under the title (and the run name in the title when its
    notebook has several runs), an experiment's code collapsed (a chapter's stays visible: it
    is the argument). ``source`` is the notebook's path as the reader finds it."""
    nb = nbformat.reads(notebook.decode("utf-8"), as_version=4)
    _place_tables(nb)
    for cell in nb.cells:
        tags = list(cell.metadata.get("tags", []))
        if {"parameters", "injected-parameters"} & set(tags):
            tags.append("remove-cell")
        elif cell.cell_type == "code" and not chapter and not any(
                t.startswith(("remove-", "hide-")) for t in tags):
            tags.append("hide-input")
        if tags:
            cell.metadata["tags"] = tags
    nb.metadata.get("papermill", {}).update(input_path=source, output_path=f"{name}.ipynb")
    if not chapter:
        rows = "\n".join(f"| `{k}` | `{v!r}` |" for k, v in params.items() if k not in hidden)
        block = (f":::{{dropdown}} Parameters of run `{name}` (profile `{profile}`)\n"
                 f"Executed from `{source}` by `dyckbook run --profile {profile}`.\n\n"
                 f"| parameter | value |\n|---|---|\n{rows}\n:::\n")
        first = _title(nb)
        if first is not None and several and nb.cells[first].source.startswith("# "):
            title, _, rest = nb.cells[first].source.partition("\n")
            nb.cells[first].source = f"{title} · `{name}`\n{rest}".rstrip("\n")
        nb.cells.insert(0 if first is None else first + 1,
                        nbformat.v4.new_markdown_cell(block, metadata={"tags": ["run-parameters"]}))
    return nbformat.writes(nb).encode("utf-8")


GLUE_PREFIX = "application/papermill.record/"  # myst-nb's mark of a glued, hidden output
_TABLE = re.compile(r"```\{glue:table\} (\S+)\n```")


def _place_tables(nb: Any) -> None:
    """``{glue:table} name`` in the text places a table glued (and shown) by ``book.glue_table``
    there instead of at its cell: the directive becomes ``{glue:md}`` (format myst) and the
    cell's output of that name is hidden, as ``display=False`` would have glued it."""
    placed = set()
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            placed.update(_TABLE.findall(cell.source))
            cell.source = _TABLE.sub(lambda m: f"```{{glue:md}} {m.group(1)}\n:format: myst\n```",
                                     cell.source)
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            glued = output.get("metadata", {}).get("scrapbook", {})
            if glued.get("name") in placed and not glued.get("mime_prefix"):
                output["data"] = {GLUE_PREFIX + k: v for k, v in output["data"].items()}
                glued["mime_prefix"] = GLUE_PREFIX


def banner(*, name: str, made_by: str, status: str, record: Mapping[str, Any], profile: str,
           has_page: bool = True, error: str = "", changed: Iterable[str] = ()) -> str | None:
    """The warning under a page's title (None for an up-to-date page of ``profile``).

    Args:
        name: the run. made_by: the profile that published it. status: its state
            (``runner.run_status``). record: its ``run.json``. profile: the book's profile.
        has_page: whether a publication is in place (else the page is a stand-in).
        error: the last attempt's error, one line.
        changed: what made a stale page stale (``runner.stale_reasons``).
    """
    lines = []
    if status != "ok" or not has_page:
        attempt = record.get("attempt") or (record if status in ("failed", "blocked") else {})
        fields = {"when": record.get("finished") or "never", "name": name, "profile": made_by,
                  "attempt": f" ({attempt['finished']})" if attempt.get("finished") else "",
                  "error": error or "no error recorded"}
        if has_page:
            lines.append(STATES.get(status, STATES["stale"]).format(**fields))
            if status == "stale" and (changed := list(changed)):
                lines[-1] += f" What changed: {'; '.join(changed)}."
        else:
            lines.append(STATES["missing"].format(**fields) + (
                " Its last attempt{attempt} {status}: {error}.".format(**fields, status=status)
                if status in ("failed", "blocked") else ""))
        lines.append(f"`python -m dyckbook run --profile {made_by} --only {name}` "
                     f"{'reruns' if has_page else 'runs'} it (`python -m dyckbook list` shows "
                     "every run's state).")
    if made_by != profile:
        lines.append(f"This page comes from profile `{made_by}`, which this build's profile "
                     f"`{profile}` leaves out.")
    return ":::{warning}\n" + "\n\n".join(lines) + "\n:::\n" if lines else None


#: a MyST target, ``(label)=``, and the heading it names, if one follows
_TARGET = re.compile(r"^\(([^)\s]+)\)=[ \t]*$\n?(^#+ .*$)?", re.MULTILINE)


def targets(source: bytes) -> list[tuple[str, str]]:
    """The MyST targets of a notebook's Markdown cells, ``(label)=``, in order, each with the
    heading line it names (``"## Negatives"``; ``""`` for none)."""
    nb = nbformat.reads(source.decode("utf-8"), as_version=4)
    return [(m.group(1), m.group(2) or "") for c in nb.cells if c.cell_type == "markdown"
            for m in _TARGET.finditer(c.source)]


def marked_page(page: str | None, title: str, warning: str | None,
                source: bytes | None = None) -> str:
    """A stored page (or, with None, a stand-in holding only ``title``) with ``warning``
    inserted under its title, and its tables placed (``{glue:table}``: a page stored by an
    earlier version of this module gets them too). A stand-in keeps every target of its
    notebook ``source`` (:func:`targets`: the title's on the title, the others on their
    headings), so the pages that refer to them still build with ``-W``."""
    if page is None:
        found = targets(source) if source is not None else []
        top = [label for label, heading in found if heading.startswith("# ")]
        cells = [nbformat.v4.new_markdown_cell("".join(f"({label})=\n" for label in top)
                                               + f"# {title}")]
        rest = [f"({label})=\n{heading or f'**{label}**'}\n\nNot published."
                for label, heading in found if label not in top]
        cells += [nbformat.v4.new_markdown_cell(text) for text in rest]
        nb = nbformat.v4.new_notebook(cells=cells)
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}
    else:
        nb = nbformat.reads(page, as_version=4)
        _place_tables(nb)
    if warning:
        first = _title(nb)
        nb.cells.insert(0 if first is None else first + 1, nbformat.v4.new_markdown_cell(
            warning, metadata={"tags": ["run-state"]}))
    return nbformat.writes(nb)


def _title(nb: Any) -> int | None:
    return next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), None)


def machine() -> str:
    """The machine a run executes on, for its provenance: the CPU model and its cores (and the
    card, when CUDA is in use), e.g. ``AMD EPYC 7B13, 2 cores``."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    text = f"{model}, {os.cpu_count()} cores"
    if "torch" in sys.modules:
        import torch  # deferred: start-up: torch (~0.8 s) off dyckbook list

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            text += f", {torch.cuda.get_device_name()}"
    return text


def source_commit(root: str | os.PathLike[str]) -> str | None:
    """The commit of the checkout at ``root`` that computed a run (``+`` when tracked files of
    the package, the notebooks or the book differ from it), or None outside a git checkout."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              check=False)

    head = git("rev-parse", "--short=12", "HEAD")
    if head.returncode != 0:
        return None
    # the book's own notebooks (chapters), not the published pages under book/runs/: a plain
    # pathspec's "*" matches "/" too, so a page published and not yet committed marked it "+"
    dirty = git("diff", "--quiet", "HEAD", "--", "dyckbook", "notebooks", ":(glob)book/*.ipynb")
    return head.stdout.strip() + ("+" if dirty.returncode == 1 else "")


def commit_text(commit: str | None) -> str:
    """A recorded commit as a page says it: ``+`` (tracked files differed from it) in words."""
    if not commit:
        return "not recorded"
    return f"{commit[:-1]} with uncommitted changes" if commit.endswith("+") else commit


def size_text(n: int) -> str:
    """A number of bytes as a page says it: ``1 MiB`` for 1048576."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n} bytes"


def duration_text(seconds: float | None) -> str:
    """A duration as the landing table and ``dyckbook list`` say it: 7.3 s, 66.6 min, 1.7 h."""
    if seconds is None:
        return "-"
    return (f"{seconds:.1f} s" if seconds < 100 else f"{seconds / 60:.1f} min"
            if seconds < 6000 else f"{seconds / 3600:.1f} h")


def provenance(record: Mapping[str, Any], folder: str | os.PathLike[str] | None = None,
               registrations: Sequence[Any] | None = None) -> dict[str, Any]:
    """What a page says of where its numbers come from, from its ``run.json`` (``record``) and
    its results ``folder``: the commit and package version that computed it, its results
    version, when it finished, on what machine and in how long (``text``: one sentence, and one
    per later rewrite of its records' format by ``dyckbook compact``; missing parts say "not
    recorded"). A run that resumed says so, with the longest it took and, where its records'
    training groups took longer than it (over its workers), what that training took: models
    resumed from a cache were trained by earlier attempts. Then the registration its claims are
    judged against (``registrations``: default ``registry.load()``), or why they are not.
    ``compute_s`` is what its numbers cost: the longest of its own time, its longest run and
    its models' training (a republish from records or a cache takes far less). A run never
    computed is one sentence that says so. ``files``: its data a reader can download (records,
    their companions, and every JSON file it wrote), relative to the output root."""
    fields = {"commit": record.get("commit"), "dyckbook": record.get("dyckbook"),
              "results_version": record.get("results_version"),
              "finished": record.get("finished"), "machine": record.get("machine"),
              "wall_s": record.get("duration_s"), "device": record.get("device")}
    wall, longest = fields["wall_s"], record.get("longest_s")  # a rerun resumed from its
    trained = training_seconds(folder, record) if folder else 0.0  # records or a cache
    # what its numbers cost: the longest of its own run, its longest run, its models' training
    spent = [t for t in (wall, longest, trained or None) if t is not None]
    fields["compute_s"] = max(spent) if spent else None
    if not any(record.get(k) for k in ("finished", "commit", "duration_s", "machine")):
        fields["text"] = "This run has not been computed: no run of it is recorded."
        fields["registration"] = None
        fields["files"] = []
        return fields
    say = {k: ("not recorded" if v is None else v) for k, v in fields.items()}
    minutes = f"{wall / 60:.1f} min" if wall is not None else "an unrecorded time"
    notes = ([f"its longest run took {longest / 60:.1f} min"] if wall is not None and longest
             and longest > 1.5 * wall else []) + (
        [f"its models' training took {trained / 60:.1f} min"]  # over its workers
        if wall is not None and trained > 1.5 * max(wall, longest or 0) else [])
    minutes += f" (resumed; {'; '.join(notes)})" if notes else ""
    when = str(say["finished"]).replace("T", " ").replace("+00:00", " UTC")
    card = "" if fields["device"] in (None, "cpu") else f" ({fields['device']})"
    fields["text"] = (f"Computed by dyckbook {say['dyckbook']} at commit "
                      f"{commit_text(fields['commit'])} (results version "
                      f"{say['results_version']}) on {say['machine']}{card}"
                      f" in {minutes}, finished {when}.")
    for entry in record.get("compacted", []):  # `dyckbook compact`: the format, not a value
        how = str(entry.get("by", "")).removeprefix("dyckbook compact: ").removesuffix(
            " (values unchanged)") or "a compact form"
        how = re.sub(r"\b(\d+) bytes\b", lambda m: size_text(int(m.group(1))), how)
        fields["text"] += (f" Its records were rewritten by `dyckbook compact` on "
                           f"{str(entry.get('on', 'an unrecorded date'))[:10]} (commit "
                           f"{commit_text(entry.get('commit'))}; {how}; values unchanged).")
    fields["registration"], said = _registration(record, registrations)
    fields["text"] += f" {said}" if said else ""
    fields["files"] = data_files(folder) if folder else []
    return fields


#: what a page offers for download from its run's results folder: records, their companions
#: and every JSON file (figures are on the page; weights and resume caches are not data)
DATA_SUFFIXES = (".json", ".jsonl", ".jsonl.gz")


def data_files(folder: str | os.PathLike[str]) -> list[str]:
    """A results folder's data files (:data:`DATA_SUFFIXES`), as paths relative to the output
    root (``book/results/<profile>/<group>/<run>/...``), sorted; none in hidden folders."""
    folder = Path(folder).resolve()
    if not folder.is_dir():
        return []
    parts = folder.parts  # <root>/book/results/<profile>/<group>/<run>
    at = next((i for i in range(len(parts) - 1, 0, -1)
               if parts[i - 1:i + 1] == ("book", "results")), None)
    root = Path(*parts[:at - 1]) if at is not None else folder.parent
    return sorted(p.relative_to(root).as_posix() for p in folder.rglob("*")
                  if p.is_file() and p.name.endswith(DATA_SUFFIXES)
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def _registration(record: Mapping[str, Any], registrations: Sequence[Any] | None
                  ) -> tuple[str | None, str]:
    """The registration a run's claims are judged against (its id as text, or "not judged"),
    and the sentence that says so; (None, "") for a run that feeds no claim."""
    if not record.get("run") or record.get("run") not in registry.verdict_runs():
        return None, ""
    found, problem = registry.check(record, registry.load() if registrations is None
                                    else registrations)
    if problem:
        return "not judged", f"Its claims are not judged: {problem}."
    every = registry.load() if registrations is None else registrations
    when = registry.registered_at(found, every).replace("T", " ").replace("Z", " UTC")
    fixed = found.of or found.id
    carried = (f" (its key carried over to the one rule of issue 66 as registration {found.id})"
               if found.of else "")
    late = registry.post_hoc(found)
    if late is not None:
        return str(fixed), (f"Its claims ({', '.join(found.claims)}) are judged against "
                            f"registration {fixed} of {when}{carried}, which is not blind: its "
                            f"rules or recipes were written with results in hand (the design "
                            f"history's entry of {late.date[:10]}, commit {late.commit}).")
    return str(fixed), (f"Its claims ({', '.join(found.claims)}) are judged against "
                        f"registration {fixed} of {when}{carried}, which fixed its recipe "
                        "before it ran.")
