"""Command-line interface: ``python -m dyckbook {generate,check,run,list}``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


class _OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one clear line and exit status 2, never a traceback."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive_int(name: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"{name} must be >= 0, got {value}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="dyckbook", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)

    gen = sub.add_parser("generate", help="generate a labelled Dyck dataset as JSONL (+ sidecar)")
    gen.add_argument("--language", choices=["dyck", "shuffle-dyck"], default="dyck")
    gen.add_argument("--k", type=_positive_int("--k"), default=1, help="number of bracket types")
    gen.add_argument("--max-depth", type=_positive_int("--max-depth"), default=None,
                     help="depth bound D for Dyck-(k, D); default unbounded")
    gen.add_argument("--n", type=_positive_int("--n"), required=True, help="number of strings")
    gen.add_argument("--min-length", type=_positive_int("--min-length"), default=0)
    gen.add_argument("--max-length", type=_positive_int("--max-length"), required=True)
    gen.add_argument("--negatives", default="hard",
                     help="'hard' (default), 'random' (the thesis' intent), or comma-separated kinds")
    gen.add_argument("--positive-fraction", type=float, default=0.5)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--out", required=True, help="output .jsonl path")

    chk = sub.add_parser("check", help="check strings for membership (exit 0 only if all are members)")
    chk.add_argument("--language", choices=["dyck", "shuffle-dyck"], default="dyck")
    chk.add_argument("--k", type=_positive_int("--k"), default=1)
    chk.add_argument("--max-depth", type=_positive_int("--max-depth"), default=None)
    chk.add_argument("strings", nargs="+", metavar="STRING")

    run = sub.add_parser("run", help="execute manifest runs with papermill into book/runs")
    run.add_argument("--profile", default="cpu")
    run.add_argument("--only", nargs="+", default=None, metavar="RUN")
    run.add_argument("--jobs", type=_positive_int("--jobs"), default=1)
    run.add_argument("--force", action="store_true")
    run.add_argument("--manifest", default=None, help="default: notebooks/experiments.yml")

    lst = sub.add_parser("list", help="list manifest runs and their status")
    lst.add_argument("--profile", default="cpu")
    lst.add_argument("--manifest", default=None)
    return parser


def _language(args: argparse.Namespace):
    from dyckbook.languages import Dyck, ShuffleDyck

    if args.language == "shuffle-dyck":
        if args.max_depth is not None:
            raise ValueError("--max-depth applies to Dyck-(k, D) only, not to shuffle-dyck")
        return ShuffleDyck(args.k)
    return Dyck(args.k, max_depth=args.max_depth)


def _cmd_generate(args: argparse.Namespace) -> int:
    from dyckbook.data import DatasetSpec, generate_dataset, save_jsonl

    negatives = args.negatives if "," not in args.negatives else tuple(
        kind.strip() for kind in args.negatives.split(",") if kind.strip())
    spec = DatasetSpec(
        language=args.language.replace("-", "_"), k=args.k, max_depth=args.max_depth, n=args.n,
        min_length=args.min_length, max_length=args.max_length, negatives=negatives,
        positive_fraction=args.positive_fraction, seed=args.seed,
    )
    dataset = generate_dataset(spec)
    save_jsonl(dataset, args.out, spec=spec)
    print(f"wrote {len(dataset)} strings to {args.out}")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    language = _language(args)
    verdicts = language.is_member_batch(args.strings)
    for string, ok in zip(args.strings, verdicts):
        print(f"{'member' if ok else 'not a member'}\t{string!r}")
    return 0 if bool(verdicts.all()) else 1


def _cmd_run(args: argparse.Namespace) -> int:
    from dyckbook import runner

    return runner.run(profile=args.profile, only=args.only, jobs=args.jobs, force=args.force,
                      manifest=args.manifest)


def _cmd_list(args: argparse.Namespace) -> int:
    from dyckbook import runner

    return runner.list_runs(profile=args.profile, manifest=args.manifest)


_COMMANDS = {"generate": _cmd_generate, "check": _cmd_check, "run": _cmd_run, "list": _cmd_list}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except BrokenPipeError:  # e.g. `python -m dyckbook list | head`: the reader left, not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return 0
    except (ValueError, KeyError, FileNotFoundError) as error:
        # Bad values found past argparse (e.g. an odd --max-length, an unknown negative kind):
        # one line, exit status 2, no traceback.
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"dyckbook {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
