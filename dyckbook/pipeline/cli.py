"""The command line: dyckbook generate | check | list | run | pages | register | verify |
compact | train-lengths (also: python -m dyckbook). -v (debug messages) and -q (warnings and
errors only) go before or after the command."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shlex
import sys
import tempfile
import textwrap
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from dyckbook.pipeline import executors
from dyckbook.pipeline.devices import check_device
from dyckbook.pipeline.executors import check_scheduler
from dyckbook.version import __version__

MAX_N = 1_000_000  # strings per dataset
MAX_LENGTH = 10_000  # symbols per string
MAX_SYMBOLS = 20_000_000  # n x max_length: about 20 s of hard negatives on one core
MAX_JOBS = 512
#: the profiles of notebooks/experiments.yml, for --profile's help (tests/test_cli.py keeps it so)
PROFILES = "smoke|cpu|thesis|grid"
# protocol.REGIMES and len(vocab.DEFAULT_PAIRS), not imported: bad arguments fail before numpy
REGIMES = ("hard", "local", "random", "stack")
MAX_K = 8
log = logging.getLogger("dyckbook.cli")


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit status 2, never a usage block; a stray
    argument is reported by its command's parser, and a string given to ``check`` that argparse
    takes for an option ('-()'; '-1' is a negative number) gets a hint to put -- before it."""

    commands: dict[str, _Parser] = {}  # noqa: RUF012 - on the top parser: name -> parser
    argv: list[str] = []  # noqa: RUF012 - the arguments this parser was last given

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        self.argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.commands.get(getattr(parsed, "command", None), self).error(
                f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def error(self, message: str) -> None:  # type: ignore[override]
        if self.prog == "dyckbook check" and (
                message.startswith("unrecognized") or "required: STRING" in message):
            before = self.argv[:(self.argv + ["--"]).index("--")]  # what precedes any --
            stray = next((a for a in before if self._unknown_option(a)), None)
            if stray:
                message = (f"{stray!r} is not an option; a string that starts with '-' goes "
                           f"after --, as in: dyckbook check -- {shlex.quote(stray)}")
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _unknown_option(self, arg: str) -> bool:
        """Whether argparse takes ``arg`` for an option (not '-', nor a negative number such
        as '-1') that this parser does not have, not even abbreviated."""
        if arg[:1] != "-" or arg == "-" or re.fullmatch(r"-\d+(\.\d*)?", arg):
            return False
        name = arg.split("=")[0]
        return not any(o in (name, arg[:2]) or (name[:2] == "--" and o.startswith(name))
                       for o in self._option_string_actions)


def _int(name: str, low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"in {low}..{high}" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"{name} must be {bound}, got {value}")
        return value

    return parse


def _device(text: str) -> str:
    try:
        return check_device(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"--{error}") from None


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command (``dyckbook <command> --help`` documents each option)."""
    common = argparse.ArgumentParser(add_help=False)  # of every parser: before or after the command
    talk = common.add_mutually_exclusive_group()  # no default: a command's keeps the top one's
    talk.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                      help="debug messages too: the command line and what a command reads, "
                           "writes and skips (list: each run's record)")
    talk.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                      help="warnings and errors only (no progress bars)")
    parser = _Parser(prog="dyckbook", description=__doc__, parents=[common])
    parser.add_argument("--version", action="version",
                        version=f"dyckbook {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    k = {"type": _int("--k", 1, MAX_K), "default": 1, "help": f"bracket types, 1..{MAX_K}"}

    gen = sub.add_parser("generate", parents=[common], help="write a labelled dataset (JSONL)")
    gen.add_argument("--k", **k)
    gen.add_argument("--n", type=_int("--n", 1, MAX_N), required=True, help="strings")
    gen.add_argument("--min-length", type=_int("--min-length", 0, MAX_LENGTH), default=0)
    gen.add_argument("--max-length", type=_int("--max-length", 0, MAX_LENGTH), required=True)
    gen.add_argument("--negatives", choices=REGIMES, default="hard",
                     help="hard (no window of --window symbols rejects them; the default), "
                          "local, random, or stack (long-range, from length 30) non-members")
    gen.add_argument("--window", type=_int("--window", 2), default=None,
                     help="w of the hard regime (default 4)")
    gen.add_argument("--seed", type=_int("--seed", 0, 2**63 - 1), default=0)
    gen.add_argument("--out", required=True, help="the .jsonl file to write (- : standard output)")

    chk = sub.add_parser("check", parents=[common],
                         help="membership of strings (exit 0 only if all are members)")
    chk.add_argument("--k", **k)
    chk.add_argument("--max-depth", type=_int("--max-depth", 1), default=None)
    chk.add_argument("strings", nargs="+", metavar="STRING")

    for name, text in (("list", "the runs of a profile, their status and parameters"),
                       ("run", "execute the runs of a profile that are not up to date"),
                       ("pages", "a profile's pages into book/pages (the book's), each marked "
                                 "when stale, failed or never published"),
                       ("register", "register the recipes of a profile's verdict-bearing runs"),
                       ("verify", "recompute published runs in a scratch folder and compare "
                                  "them with their publication, number by number"),
                       ("compact", "rewrite published records with each baselines blob once "
                                   "(no value changes; run.json records it)")):
        cmd = sub.add_parser(name, parents=[common], help=text)
        cmd.add_argument("--profile", default="cpu",
                         help=f"a profile of the manifest ({PROFILES}; default: cpu)")
        cmd.add_argument("--manifest", default=None, help="default: notebooks/experiments.yml")
    sub.choices["register"].add_argument("--note", required=True,
                                         help="why (printed in the book's history table)")
    check = sub.choices["verify"]
    check.add_argument("--only", nargs="+", required=True, metavar="RUN",
                       help="run names, notebook keys or glob patterns")
    check.add_argument("--out", default=None, type=Path,
                       help="where the recomputed files and report.json go "
                            "(default: scratch/verify/PROFILE)")
    sub.choices["compact"].add_argument("--only", nargs="+", default=None, metavar="RUN",
                                        help="run names, notebook keys or glob patterns "
                                             "(default: every published run)")
    run = sub.choices["run"]
    run.add_argument("--only", nargs="+", default=None, metavar="RUN",
                     help="run names, notebook keys or glob patterns")
    run.add_argument("--force", action="store_true", help="rerun runs that are up to date")
    run.add_argument("--jobs", type=_int("--jobs", 0, MAX_JOBS), default=1,
                     help="workers (0: one per core)")
    run.add_argument("--scheduler", default=None,
                     help="processes (default), local (a Dask LocalCluster) or tcp://HOST:PORT")
    run.add_argument("--device", default=None, type=_device,
                     help="where every training notebook trains: cpu (its default), cuda, "
                          "cuda:N, auto (CUDA where there is one); recorded, never hashed")
    lengths = sub.add_parser(
        "train-lengths", parents=[common],
        help="train a profile's length study (07) on a device into a resume cache that "
             "`run` then publishes from (ARCHITECTURE.md: 07 on a GPU)")
    lengths.add_argument("--profile", default="thesis",
                         help=f"a profile of the manifest ({PROFILES}; default: thesis)")
    lengths.add_argument("--manifest", default=None, help="default: notebooks/experiments.yml")
    lengths.add_argument("--run", default="generalisation", help="a run of 07_generalisation")
    lengths.add_argument("--params", default=None,
                         help="the run's parameters from --write-params (no notebook packages "
                              "needed), instead of the manifest")
    lengths.add_argument("--write-params", default=None, metavar="FILE",
                         help="write the run's parameters here and stop")
    lengths.add_argument("--out", default=None, help="the folder of records.jsonl")
    lengths.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1")
    lengths.add_argument("--workers", type=_int("--workers", 1, MAX_JOBS), default=1,
                         help="configurations trained side by side (processes)")
    lengths.add_argument("--data-cache", default=None, metavar="DIR",
                         help="read and write the splits in this folder (DYCKBOOK_DATA_CACHE)")
    lengths.add_argument("--data-only", action="store_true",
                         help="make every seed's splits and rules' scores into --data-cache "
                              "and stop (on the CPU: then carry the folder to the device "
                              "machine)")
    parser.commands = sub.choices
    return parser


def _out_path(text: str) -> Path:
    """The output file, checked before any work: a new or regular file in a writable folder (a
    link to a regular file is written through; a device such as /dev/null is refused, since the
    atomic write would replace it: use --out - and redirect standard output instead)."""
    path = Path(text)
    try:
        if not text.strip() or text.endswith(("/", os.sep)) or path.is_dir():
            raise ValueError(f"--out must name a file, got {text!r}" + (
                " (a folder)" if text.strip() and path.is_dir() else ""))
        if path.is_symlink() and not path.exists():
            raise ValueError(f"--out {text!r} is a broken symbolic link (to "
                             f"{os.readlink(path)!r}); refusing to replace it")
        if path.exists() and not path.is_file():
            raise ValueError(f"--out {text!r} is not a regular file (a device, pipe or socket); "
                             "refusing to replace it (to discard the output: --out - >/dev/null)")
        target = path.resolve() if path.is_symlink() else path
        if not target.parent.is_dir():
            raise ValueError(f"--out {text!r}: {target.parent} is not an existing folder")
        # the very temporary file results.write_bytes will create
        fd, probe = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise ValueError(f"--out {text!r}: cannot write there ({error.strerror})") from None
    log.debug("--out %s: %s", text, f"a new file in {target.parent}" if not target.exists()
              else f"replaces {target}, keeping its permissions")
    return path


def _cmd_generate(args: argparse.Namespace) -> int:
    import numpy as np  # deferred: start-up: numpy (~35 ms) off --help

    from dyckbook.data.languages import (  # deferred: start-up: numpy (~40 ms) off --help
        Dyck,
        local_tables,
    )
    from dyckbook.data.protocol import (  # deferred: start-up: numpy (~55 ms) off --help
        balanced_sample,
        regime_lengths,
    )

    lo, hi = args.min_length, args.max_length
    if args.n * hi > MAX_SYMBOLS:
        raise ValueError(f"--n {args.n} x --max-length {hi} = {args.n * hi:,} symbols exceeds "
                         f"the limit of {MAX_SYMBOLS:,}")
    if args.n % 2:
        raise ValueError(f"--n must be even (a member and a non-member at every length drawn), "
                         f"got {args.n}")
    if lo > hi or (lo + 1) // 2 > hi // 2:
        raise ValueError(f"--min-length {lo} .. --max-length {hi} holds no even length "
                         "(Dyck words have even length)")
    if args.window is not None and args.negatives != "hard":
        raise ValueError(f"--window applies to --negatives hard only, not {args.negatives!r}")
    language, window = Dyck(args.k), args.window or 4
    try:
        local_tables(language, window)
    except ValueError as error:
        raise ValueError(f"--window {window}: {error}") from None
    out = None if args.out == "-" else _out_path(args.out)  # "-": standard output
    usable = regime_lengths(language, args.negatives, lo, hi, window)
    log.debug("%s, %d strings, lengths %d..%d, %s negatives%s, seed %d", language.name, args.n,
              lo, hi, args.negatives, f" (window {window})" * (args.negatives == "hard"), args.seed)
    if not usable:
        shortest = next((L for L in range(hi + 1, 257) if regime_lengths(
            language, args.negatives, L, L, window)), None)
        where = (f"; the shortest length that has them is {shortest}" if shortest is not None
                 else " (nor at any length up to 256)")
        raise ValueError(f"--negatives {args.negatives}: {language.name} has no such non-member "
                         f"at lengths {lo}..{hi}"
                         + (f" with --window {window}" if args.negatives == "hard" else "")
                         + where)
    skipped = [L for L in range(lo + lo % 2, hi + 1, 2) if L not in usable]
    if skipped:
        log.info("lengths %s have no %s negatives for %s: left out (every length written holds "
                 "as many members as non-members)", _ranges(skipped), args.negatives,
                 language.name)
    rng = np.random.default_rng(args.seed)
    data = balanced_sample(language, args.negatives, rng.choice(usable, args.n // 2), window, rng)
    from dyckbook.experiment.results import (  # deferred: start-up: numpy (~55 ms) off --help
        dataset_text,
        write_dataset,
    )

    shuffled = data.subset(rng.permutation(len(data)))
    log.debug("drew %d strings at %d lengths: %s", len(data), len(set(data.lengths.tolist())),
              ", ".join(f"{k} {v}" for k, v in sorted(Counter(data.kinds.tolist()).items())))
    if out is None:
        sys.stdout.write(dataset_text(shuffled))
        log.info("wrote %d strings (%d members) to standard output", len(data), len(data) // 2)
        return 0
    write_dataset(out, shuffled)
    print(f"wrote {len(data)} strings ({len(data) // 2} members) to {out}")
    return 0


def _ranges(values: list[int]) -> str:
    """Even lengths as ranges: [2, 4, 6, 10] -> '2..6, 10'."""
    parts, start = [], values[0]
    for a, b in zip(values, values[1:] + [None]):
        if b != a + 2:
            parts.append(str(start) if start == a else f"{start}..{a}")
            start = b
    return ", ".join(parts)


def _cmd_check(args: argparse.Namespace) -> int:
    from dyckbook.data.languages import Dyck  # deferred: start-up: numpy (~40 ms) off --help

    language = Dyck(args.k, args.max_depth)
    log.debug("checking %d string(s) against %s", len(args.strings), language.name)
    verdicts = language.is_member(args.strings)
    for string, member in zip(args.strings, verdicts):
        print(f"{'member' if member else 'not a member'}\t{string!r}")
    return 0 if bool(verdicts.all()) else 1


def _manifest(args: argparse.Namespace) -> Path:
    """--manifest (or the repository's), refused here if it is not a file the runner can read:
    a pipe or a device would otherwise be reported as 'not found'."""
    from dyckbook.experiment.results import (  # deferred: start-up: numpy (~55 ms) off --help
        source_root,
    )

    if args.manifest is None:
        return source_root() / "notebooks" / "experiments.yml"
    path = Path(args.manifest)
    if not args.manifest.strip() or (path.exists() and not path.is_file() and not path.is_dir()):
        raise ValueError(f"--manifest {args.manifest!r} is not a regular file")
    if path.is_file() and not os.access(path, os.R_OK):
        raise ValueError(f"--manifest {args.manifest!r}: cannot read it (permission denied)")
    log.debug("manifest %s", path.resolve())
    return path


def _where(manifest: Path) -> None:
    """One line naming the manifest (so the repository) and the output root acted on."""
    from dyckbook.experiment.results import (  # deferred: start-up: numpy (~55 ms) off --help
        ROOT_ENV,
        repo_root,
    )

    log.info("manifest %s; output root %s%s", manifest.resolve(), repo_root(),
             f" (from ${ROOT_ENV})" if os.environ.get(ROOT_ENV) else "")


def _cmd_list(args: argparse.Namespace) -> int:
    from dyckbook.experiment.results import (  # deferred: start-up: numpy (~55 ms) off --help
        repo_root,
    )
    from dyckbook.pipeline.layout import (  # deferred: start-up: numpy (~55 ms) off --help
        run_results_dir,
    )

    manifest = _manifest(args)  # before the runner: a bad --manifest fails without papermill
    from dyckbook.pipeline import runner  # deferred: start-up: nbformat etc. (~0.95 s) off --help

    rows = runner.statuses(args.profile, manifest)
    why = runner.stale_reasons(args.profile, manifest) if any(
        status == "stale" for _, status, _ in rows) else {}
    _where(manifest)
    from dyckbook.claims import registry  # deferred: start-up: numpy+yaml (~75 ms) off --help
    from dyckbook.pipeline import pages  # deferred: start-up: nbformat etc. (~0.95 s) off --help

    registrations = registry.load()
    said = {run.name: pages.provenance(record, run_results_dir(
        run.profile, run.notebook.group, run.name, repo_root()), registrations)
        for run, _, record in rows}
    width = max([len(r.name) for r, _, _ in rows] + [3])
    # republish: what its last run took; compute: what its models' training took (a run that
    # resumed from its records or a cache took far less than its numbers cost)
    print(f"{'run':<{width}}  {'status':<7}  {'republish':>9}  {'compute':>9}  "
          f"{'finished':<16}  {'commit':<13}  {'judged':<10}  {'notebook':<20}  machine")
    for run, status, record in rows:
        log.debug("%s: %s, read from %s", run.name, status, run_results_dir(
            run.profile, run.notebook.group, run.name, repo_root()) / "run.json")
        p = said[run.name]
        judged = (f"reg. {p['registration']}" if str(p.get("registration") or "").isdigit()
                  else p.get("registration") or "-")
        print(f"{run.name:<{width}}  {status:<7}  {pages.duration_text(p['wall_s']):>9}  "
              f"{pages.duration_text(p['compute_s']):>9}  "
              f"{str(record.get('finished') or '-')[:16].replace('T', ' '):<16}  "
              f"{record.get('commit') or '-':<13}  {judged:<10}  {run.notebook.key:<20}  "
              f"{record.get('machine') or '-'}")
        if record.get(runner.ATTEMPT):
            attempt = record[runner.ATTEMPT]
            error = attempt.get("error")
            print(f"    last attempt {attempt['status']} {str(attempt.get('finished'))[:19]}"
                  f"{': ' + runner.describe_error(error) if error else ''}"
                  "; the results above stay published")
        if why.get(run.name):
            print(textwrap.fill("stale: " + "; ".join(why[run.name]), 100,
                                initial_indent="    ", subsequent_indent="      "))
        if record.get("inputs"):  # what its publication read (runs, committed files)
            print("    read " + ", ".join(k.removeprefix("file:") for k in record["inputs"]))
        shown = " ".join(f"{k}={v!r}" for k, v in run.params.items()
                         if k not in ("run_name", "results_dir", "num_threads"))
        print(textwrap.fill(shown, 100, initial_indent="    ", subsequent_indent="    ",
                            break_on_hyphens=False))
    counts = sorted(Counter(status for _, status, _ in rows).items())
    print(f"profile {args.profile}: " + ", ".join(f"{v} {k}" for k, v in counts))
    return 0


def _cmd_pages(args: argparse.Namespace) -> int:
    from dyckbook.pipeline import runner  # deferred: start-up: nbformat etc. (~0.95 s) off --help

    manifest = _manifest(args)
    states = runner.assemble_pages(args.profile, manifest)
    _where(manifest)
    marked = {name: state for name, state in states.items() if state != "ok"}
    print(f"profile {args.profile}: {len(states)} pages in book/pages"
          + (f", {len(marked)} marked: " + ", ".join(f"{k} ({v})" for k, v in marked.items())
             if marked else ", all up to date"))
    return 0


def _cmd_register(args: argparse.Namespace) -> int:
    if not args.note.strip():  # before the manifest is read: registry.register says the same
        raise ValueError(f"note must say why the recipe is registered, got {args.note!r}")
    from dyckbook.pipeline import runner  # deferred: start-up: nbformat etc. (~0.95 s) off --help

    runs = runner.resolve_profile(runner.load_manifest(_manifest(args)), args.profile)
    from dyckbook.claims import registry  # deferred: start-up: numpy+yaml (~75 ms) off --help

    log.debug("profile %s: %d runs; registry %s", args.profile, len(runs),
              registry.registry_path())
    new = registry.register(args.profile, {r.name: r.params for r in runs}, args.note)
    for r in new:
        print(f"registration {r.id}: {r.profile} {r.run} {r.digest} ({', '.join(r.claims)})")
    if not new:
        print(f"profile {args.profile}: every verdict-bearing recipe is already registered")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    check_scheduler(args.scheduler)  # before the (slow) manifest is read
    from dyckbook.pipeline import runner  # deferred: start-up: nbformat etc. (~0.95 s) off --help

    manifest = _manifest(args)
    # the same checks runner.run makes, so that bad input fails before the line naming the roots
    runs = runner.resolve_profile(runner.load_manifest(manifest), args.profile)
    chosen = runner.select_runs(runs, args.only, args.profile)
    log.debug("profile %s: %d of %d runs selected (%s)", args.profile, len(chosen), len(runs),
              ", ".join(r.name for r in chosen))
    _where(manifest)
    return runner.run(args.profile, args.only, force=args.force, jobs=args.jobs,
                      scheduler=args.scheduler, manifest=manifest, device=args.device)


def _cmd_compact(args: argparse.Namespace) -> int:
    from dyckbook.pipeline import compact  # deferred: start-up: nbformat etc. (~0.95 s) off --help

    manifest = _manifest(args)
    _where(manifest)
    changed = compact.compact(args.profile, args.only, manifest)
    for run, files in changed.items():
        for rel, (before, after) in files.items():
            print(f"  {run}: {rel} {before:,} -> {after:,} bytes (with its companion)")
    print(f"{len(changed)} run(s) compacted" + ("; runs that read them are now stale: rerun "
                                                "them" if changed else ""))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from dyckbook.pipeline import verify  # deferred: start-up: nbformat etc. (~0.95 s) off --help

    manifest = _manifest(args)
    _where(manifest)
    reports = verify.verify(args.profile, args.only, args.out, manifest)
    for report in reports:
        for d in report.differences:
            print(f"  {d.verdict:9s} {d.where}: published {d.published!r}, "
                  f"recomputed {d.recomputed!r}")
        for figure, verdict in report.figures.items():
            if verdict != "equal":
                print(f"  figure    {figure}: differs in bytes (decides nothing)")
        print(report.summary())
    return 0 if all(r.ok for r in reports) else 1


def _out_folder(text: str) -> Path:
    """train-lengths' --out: a folder that records.jsonl can be written into, or one that can
    be made; anything else is an error before a configuration trains."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out must name a folder (records.jsonl is written into it), got "
                         f"{text!r}, which is a file")
    base = next(p for p in (path, *path.parents) if p.exists())
    if not base.is_dir() or not os.access(base, os.W_OK) or (path / "records.jsonl").is_dir():
        raise ValueError(f"--out {text!r}: records.jsonl cannot be written there ({base} is "
                         f"not a folder this user can write to)")
    return path


def _cmd_train_lengths(args: argparse.Namespace) -> int:
    out = _out_folder(args.out) if args.out else None  # before anything trains
    if args.params:
        try:
            params = json.loads(Path(args.params).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"--params {args.params}: no such file") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"--params {args.params} is not a JSON file of parameters "
                             f"(--write-params writes one): {error}") from None
        if not isinstance(params, dict):
            raise ValueError(f"--params must hold a JSON object, got {args.params}")
    else:
        from dyckbook.pipeline import (  # deferred: start-up: nbformat etc. (~0.95 s) off --help
            runner,
        )

        runs = runner.resolve_profile(runner.load_manifest(_manifest(args)), args.profile)
        chosen = [r for r in runs if r.name == args.run]
        if not chosen or chosen[0].notebook.key != "07_generalisation":
            raise ValueError(f"--run must name a run of 07_generalisation in profile "
                             f"{args.profile}, got {args.run!r}")
        params = dict(chosen[0].params)
    if args.write_params:
        from dyckbook.experiment import results  # deferred: start-up: numpy (~55 ms) off --help

        results.write_bytes(args.write_params, json.dumps(params, indent=1).encode())
        print(f"wrote {args.write_params}")
        return 0
    if args.data_only and not args.data_cache:
        raise ValueError("--data-only needs --data-cache DIR (the folder the splits go to)")
    if out is None and not args.data_only:
        raise ValueError("--out must name the folder of records.jsonl")
    from dyckbook.chapters import (  # deferred: start-up: torch (~0.85 s) off --help
        generalisation,
        page,
    )
    from dyckbook.experiment import cache  # deferred: start-up: numpy (~70 ms) off --help

    if args.data_cache:  # before the workers start: they inherit it
        os.environ[cache.DATA_ENV] = str(Path(args.data_cache).resolve())
        cache.folder(cache.DATA_ENV)  # a file there is refused now, not in a worker
    configs = generalisation.study(params).every
    seeds = range(int(params["n_seeds"]))
    if args.data_only:
        with executors.make_executor(None, args.workers) as executor:
            made = page.make_data(configs, seeds, executor if args.workers > 1 else None)
        print(f"{made} (data config, seed) splits and their rules' scores in {args.data_cache}")
        return 0
    with executors.make_executor(None, args.workers) as executor:
        records = generalisation.run_records(configs, seeds, out,
                                           executor if args.workers > 1 else None, args.device)
    print(f"{sum(map(len, records.values()))} records in {out / 'records.jsonl'}")
    return 0


class _Handler(logging.Handler):
    """Log lines on stderr, above a progress bar; a debug line says so and names its logger."""

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record)
        if record.levelno < logging.INFO:
            text = f"debug: {record.name}: {text}"
        tqdm.write(text, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command; bad input is one line on stderr and exit status 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose, quiet = getattr(args, "verbose", False), getattr(args, "quiet", False)
    if verbose and quiet:  # one before the command, one after it
        parser.error("argument -q/--quiet: not allowed with argument -v/--verbose")
    if quiet:
        os.environ["DYCKBOOK_QUIET"] = "1"  # no progress bars either
    logger = logging.getLogger("dyckbook")  # every dyckbook.* logger, the runner's included
    if not any(isinstance(h, _Handler) for h in logger.handlers):
        logger.addHandler(_Handler())
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    log.debug("dyckbook %s (%s), Python %s: %s", __version__, Path(__file__).parents[1],
              sys.version.split()[0], " ".join(map(shlex.quote, parser.argv)))
    command = {"generate": _cmd_generate, "check": _cmd_check, "list": _cmd_list,
               "pages": _cmd_pages, "register": _cmd_register, "run": _cmd_run,
               "verify": _cmd_verify, "compact": _cmd_compact,
               "train-lengths": _cmd_train_lengths}[args.command]
    try:
        return command(args)
    except BrokenPipeError:  # `dyckbook list | head`: the reader left; not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silences the flush at exit
        return 0
    except (ValueError, OSError) as error:  # bad input (2); a full disk, a vanished folder (1)
        text = re.sub(r"\s*\n\s*", " ", str(error).strip())  # one line, values as they are
        print(f"dyckbook {args.command}: error: {text}", file=sys.stderr)
        return 2 if isinstance(error, (ValueError, FileNotFoundError)) else 1
    except KeyboardInterrupt:
        print(f"dyckbook {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
