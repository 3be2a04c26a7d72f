#!/usr/bin/env bash
# A lent GPU machine's session, prepared here and run there (bench_gpu.py's docstring).
#
#   bash benchmarks/gpu_session.sh prepare       # here: wheels and a one-commit .git into .whl/
#   device run, carry [".whl"]:
#     bash benchmarks/gpu_session.sh check        # the CUDA-marked tests, then bench_gpu.py
#     bash benchmarks/gpu_session.sh runs 560 ablation-grid intervention
#                                                 # cpu-profile runs through the runner, side by
#                                                 # side, for at most the seconds given; what
#                                                 # they published comes back as
#                                                 # $OUT/published.tgz, the run cache as
#                                                 # $OUT/run-cache.tgz
#   here: python benchmarks/bench_gpu.py --adopt <files_at>/gpu.json; untar published.tgz at the
#   repository root, check it with `python -m dyckbook list`, commit it.
#
# The machine's python3 (3.12) has torch but not the notebook stack: `prepare` downloads the
# wheels of the versions this venv holds. The runner records the commit of the tree it ran
# (pages.source_commit): the shallow clone of HEAD gives the device copy that commit, so a
# published run's provenance names it (commit first: a dirty tree is marked "+").
# Measured on an H200, 2026-11-28: `check` 137 s with a 60 s runs budget; the cpu grid through
# the runner had not finished in 560 s (before page.shared_data), nor in 539 s after it beside
# intervention (about 400 of its 720 seeds in the run cache: its 16 worker processes and
# intervention's 6 share the card by time slices, and the steps of such small models are
# launch-bound).
set -u
STACK="papermill nbformat nbclient ipykernel ipython ipython_pygments_lexers jupyter_client
jupyter_core traitlets pyzmq tornado comm debugpy matplotlib-inline nest-asyncio2 jsonschema
jsonschema-specifications referencing rpds-py fastjsonschema entrypoints tenacity platformdirs
jedi parso prompt_toolkit wcwidth pexpect ptyprocess stack-data executing asttokens pure_eval
decorator"

setup() {  # there, at the start of every call: the packages, the commit
  export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
  [ -d /tmp/site/papermill ] || python3 -m pip install -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH="/tmp/site:$PWD"
  rm -rf .git && cp -r .whl/git .git && git reset -q  # the device's copy may hold another .git
  echo "commit $(git rev-parse --short=12 HEAD), $(git status --short -- dyckbook notebooks |
    wc -l) changed files; $(nvidia-smi -L)"
}

case "${1:-}" in
prepare)
  grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
  rm -rf .whl && mkdir -p .whl
  pins=$(.venv/bin/python -m pip list --format=freeze 2>/dev/null |
    grep -i -E "^($(echo $STACK | tr ' ' '|'))==" )
  (cd .whl && python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 $pins) || exit 1
  tmp=$(mktemp -d) && git clone -q --depth 1 --no-checkout "file://$PWD" "$tmp/c" &&
    mv "$tmp/c/.git" .whl/git && rm -rf "$tmp"
  echo "$(ls .whl/*.whl | wc -l) wheels, $(du -sh .whl | cut -f1) in .whl (carry it)";;
check)
  t0=$(date +%s); setup
  timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_run.py -k on_cuda 2>&1 |
    tail -3
  timeout 300 python3 benchmarks/bench_gpu.py --budget-s 60 --out "$OUT/gpu.json" \
    > "$OUT/bench.log" 2>&1; echo "bench rc=$?"; tail -40 "$OUT/bench.log"
  echo "check: $(( $(date +%s) - t0 )) s";;
runs)
  t0=$(date +%s); limit=$2; shift 2; setup
  export DYCKBOOK_DATA_CACHE=/tmp/dc DYCKBOOK_RUN_CACHE=/tmp/rc
  touch /tmp/mark
  for run in "$@"; do  # side by side: one runner each (they may be of different stages)
    ( timeout $(( limit - 20 )) python3 -m dyckbook run --profile cpu --device cuda --jobs 0 \
        --only "$run" > "$OUT/$run.log" 2>&1
      rc=$?; echo "$run rc=$rc at $(( $(date +%s) - t0 )) s"; [ $rc = 0 ] || touch /tmp/unfinished
    ) &
  done
  wait
  echo "run cache: $(ls /tmp/rc | wc -l) files"
  for run in "$@"; do tail -3 "$OUT/$run.log"; done
  find book/results/cpu book/runs/cpu -newer /tmp/mark -type f > /tmp/files
  [ -s /tmp/files ] && tar czf "$OUT/published.tgz" -T /tmp/files
  # a run that did not finish resumes from its cached seeds: in parts of 15 MiB (the $OUT limit)
  [ -e /tmp/unfinished ] && tar czf - -C /tmp rc | split -b 15M - "$OUT/run-cache.tgz.";;
*)
  sed -n 2,12p "$0"; exit 2;;
esac
