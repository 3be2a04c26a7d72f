"""The command line: dyckbook generate | check | list | run (also: python -m dyckbook)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from dyckbook.version import __version__

MAX_N = 1_000_000  # strings per dataset
MAX_LENGTH = 10_000  # symbols per string
MAX_SYMBOLS = 20_000_000  # n x max_length: about 20 s of hard negatives on one core
MAX_JOBS = 512
REGIMES = ("hard", "local", "random", "stack")  # protocol.REGIMES (not imported: no numpy yet)
log = logging.getLogger("dyckbook")


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit status 2, never a usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


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


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command (``dyckbook <command> --help`` documents each option)."""
    from dyckbook.vocab import DEFAULT_PAIRS

    common = argparse.ArgumentParser(add_help=False)
    talk = common.add_mutually_exclusive_group()
    talk.add_argument("-v", "--verbose", action="store_true", help="debug messages too")
    talk.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    parser = _Parser(prog="dyckbook", description=__doc__)
    parser.add_argument("--version", action="version",
                        version=f"dyckbook {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    k = {"type": _int("--k", 1, len(DEFAULT_PAIRS)), "default": 1,
         "help": f"bracket types, 1..{len(DEFAULT_PAIRS)}"}

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
                       ("run", "execute the runs of a profile that are not up to date")):
        cmd = sub.add_parser(name, parents=[common], help=text)
        cmd.add_argument("--profile", default="cpu")
        cmd.add_argument("--manifest", default=None, help="default: notebooks/experiments.yml")
    reg = sub.add_parser("register", parents=[common],
                         help="register the recipes of a profile's verdict-bearing runs")
    reg.add_argument("--profile", default="cpu")
    reg.add_argument("--manifest", default=None, help="default: notebooks/experiments.yml")
    reg.add_argument("--note", required=True, help="why (printed in the book's history table)")
    run = sub.choices["run"]
    run.add_argument("--only", nargs="+", default=None, metavar="RUN",
                     help="run names, notebook keys or glob patterns")
    run.add_argument("--force", action="store_true", help="rerun runs that are up to date")
    run.add_argument("--jobs", type=_int("--jobs", 0, MAX_JOBS), default=1,
                     help="workers (0: one per core)")
    run.add_argument("--scheduler", default=None,
                     help="processes (default), local (a Dask LocalCluster) or tcp://HOST:PORT")
    return parser


def _out_path(text: str) -> Path:
    """The output file, checked before any work: a new or regular file in a writable folder."""
    path = Path(text)
    try:
        if not text.strip() or text.endswith(("/", os.sep)) or path.is_dir():
            raise ValueError(f"--out must name a file, got {text!r}" + (
                " (a folder)" if text.strip() and path.is_dir() else ""))
        if path.exists() and not path.is_file():
            raise ValueError(f"--out {text!r} is not a regular file (a device, pipe or socket); "
                             "refusing to replace it")
        if not path.parent.is_dir():
            raise ValueError(f"--out {text!r}: {path.parent} is not an existing folder")
        # the very temporary file results.write_bytes will create
        fd, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise ValueError(f"--out {text!r}: cannot write there ({error.strerror})") from None
    return path


def _cmd_generate(args: argparse.Namespace) -> int:
    import numpy as np

    from dyckbook.languages import Dyck, local_tables
    from dyckbook.protocol import balanced_sample, regime_lengths

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
    from dyckbook.results import dataset_text, write_dataset  # torch: only once input is valid

    shuffled = data.subset(rng.permutation(len(data)))
    if out is None:
        sys.stdout.write(dataset_text(shuffled))
        print(f"wrote {len(data)} strings ({len(data) // 2} members) to standard output",
              file=sys.stderr)
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
    from dyckbook.languages import Dyck

    verdicts = Dyck(args.k, args.max_depth).is_member(args.strings)
    for string, member in zip(args.strings, verdicts):
        print(f"{'member' if member else 'not a member'}\t{string!r}")
    return 0 if bool(verdicts.all()) else 1


def _cmd_list(args: argparse.Namespace) -> int:
    from dyckbook import runner

    rows = runner.statuses(args.profile, args.manifest)
    width = max([len(r.name) for r, _, _ in rows] + [3])
    print(f"{'run':<{width}}  {'status':<7}  {'seconds':>8}  {'finished':<19}  notebook")
    counts: dict[str, int] = {}
    for run, status, record in rows:
        counts[status] = counts.get(status, 0) + 1
        seconds = record.get("duration_s")
        print(f"{run.name:<{width}}  {status:<7}  "
              f"{'-' if seconds is None else f'{seconds:.1f}':>8}  "
              f"{str(record.get('finished') or '-')[:19]:<19}  {run.notebook.key}")
        shown = " ".join(f"{k}={v!r}" for k, v in run.params.items()
                         if k not in ("run_name", "results_dir", "num_threads"))
        print(textwrap.fill(shown, 100, initial_indent="    ", subsequent_indent="    ",
                            break_on_hyphens=False))
    print(f"profile {args.profile}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return 0


def _cmd_register(args: argparse.Namespace) -> int:
    from dyckbook import registry, runner

    runs = runner.resolve_profile(runner.load_manifest(args.manifest), args.profile)
    new = registry.register(args.profile, {r.name: r.params for r in runs}, args.note)
    for r in new:
        print(f"registration {r.id}: {r.profile} {r.run} {r.digest} ({', '.join(r.claims)})")
    if not new:
        print(f"profile {args.profile}: every verdict-bearing recipe is already registered")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from dyckbook import runner

    return runner.run(args.profile, args.only, force=args.force, jobs=args.jobs,
                      scheduler=args.scheduler, manifest=args.manifest)


class _Handler(logging.Handler):
    """Log lines on stderr, written above a progress bar rather than through it."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        tqdm.write(self.format(record), file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command; bad input is one line on stderr and exit status 2."""
    args = build_parser().parse_args(argv)
    if args.quiet:
        os.environ["DYCKBOOK_QUIET"] = "1"  # no progress bars either
    logger = logging.getLogger("dyckbook")
    if not any(isinstance(h, _Handler) for h in logger.handlers):
        logger.addHandler(_Handler())
    logger.setLevel(logging.DEBUG if args.verbose else logging.WARNING if args.quiet else
                    logging.INFO)
    command = {"generate": _cmd_generate, "check": _cmd_check, "list": _cmd_list,
               "register": _cmd_register, "run": _cmd_run}[args.command]
    try:
        return command(args)
    except BrokenPipeError:  # `dyckbook list | head`: the reader left; not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silences the flush at exit
        return 0
    except (ValueError, OSError) as error:  # bad input (2); a full disk, a vanished folder (1)
        print(f"dyckbook {args.command}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2 if isinstance(error, (ValueError, FileNotFoundError)) else 1
    except KeyboardInterrupt:
        print(f"dyckbook {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
