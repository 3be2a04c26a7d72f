"""``python -m dyckbook``: the command line (``dyckbook.pipeline.cli``)."""

from dyckbook.pipeline.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
