# dyckbook: the verbs. `make book` (the main job) and `make test` are the whole set-up on a
# fresh clone: both create the virtual environment on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PROFILE ?= cpu
JOBS ?= 2
PYTEST_WORKERS ?= 2
MATHJAX_DIR := book/_static/mathjax

.PHONY: help venv browser mathjax runs book grid book-full smoke test lab bench clean

help:
	@echo "make book [PROFILE=cpu|smoke|thesis] [JOBS=2]  run the experiments, build the book (_build/html)"
	@echo "make book-full                                 the full ablation grid (~80 min on 2 cores), then make book"
	@echo "make test                                      every test CI runs"
	@echo "make smoke                                     the quick preview (PROFILE=smoke)"
	@echo "make lab                                       JupyterLab with dyckbook importable"
	@echo "make bench                                     benchmarks -> benchmarks/results/*.json"
	@echo "make clean                                     remove build artifacts (keeps .venv)"

venv: $(VENV)/.installed

# pip is pointed at constraints.txt so torch resolves to the pinned CPU wheel, not a 5 GB CUDA build.
$(VENV)/.installed: pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing dyckbook and its dependencies into $(VENV) (log: $(VENV)/pip.log)"
	@$(PY) -m pip install --disable-pip-version-check -q -c constraints.txt -e '.[book,dev]' \
		> $(VENV)/pip.log 2>&1 || { grep -v 'is ignored: it is neither' $(VENV)/pip.log | tail -40; exit 1; }
	@touch $@

# Debian's Chromium for the real-browser test of the built book (never `playwright install`).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Debian chromium for the browser test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# MathJax 3 from the django-static-mathjax wheel, so the book renders math with no network.
mathjax: venv
	@MJ="$$($(PY) -c 'import mathjax, pathlib; print(pathlib.Path(mathjax.__file__).parent / "static/mathjax/es5")')"; \
	mkdir -p $(MATHJAX_DIR)/input/tex && cp "$$MJ/tex-svg.js" $(MATHJAX_DIR)/ && \
	rm -rf $(MATHJAX_DIR)/input/tex/extensions && cp -r "$$MJ/input/tex/extensions" $(MATHJAX_DIR)/input/tex/

runs: venv
	$(PY) -m dyckbook run --profile $(PROFILE) --jobs $(JOBS)

book: runs mathjax
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	@echo "open _build/html/index.html"

# The full ablation grid (profile `grid`: 1,800 models, one worker per core); its records are kept
# and resumed, so a rerun with unchanged settings only re-renders its page.
grid: venv
	$(PY) -m dyckbook run --profile grid

# Every number of the book including the full grid's, from the manifest, in one command.
book-full: grid
	$(MAKE) book

smoke:
	$(MAKE) book PROFILE=smoke

test: venv browser mathjax
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile

lab: venv
	$(VENV)/bin/jupyter lab notebooks/

bench: venv
	@for script in benchmarks/bench_*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

clean:
	rm -rf _build book/runs book/results $(MATHJAX_DIR) test-artifacts .pytest_cache .hypothesis
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +
