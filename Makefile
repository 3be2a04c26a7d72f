# dyckbook: the verbs. `make book` (the main job) and `make test` are the whole set-up on a
# fresh clone: both create the virtual environment on first use.
#
# A conda (or any other) environment that is already active: `make book USE_ACTIVE_ENV=1` (or
# `VENV=`) uses its python and tools instead of creating .venv; install it first with
# `conda env create -f environment.yml && conda activate dyckbook`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PROFILE ?= cpu
JOBS ?= 2
SCHEDULER ?=
# where every training notebook trains: cpu, cuda, cuda:N, auto (empty: each notebook's cpu)
DEVICE ?=
# trained runs kept by (configuration, seed, code): a stopped `make book` resumes (empty: off)
RUN_CACHE ?= .cache/runs
PYTEST_WORKERS ?= 2
LAB_ARGS ?=
MATHJAX_DIR := book/_static/mathjax
ifeq ($(USE_ACTIVE_ENV),1)
override VENV :=
endif
ifeq ($(strip $(VENV)),)
BIN :=
PY := python
else
BIN := $(VENV)/bin/
PY := $(VENV)/bin/python
# the checkout whose dyckbook VENV's python imports (isolated: not this folder by its cwd); a
# venv of another checkout is never repointed here by `pip install -e` (VENV_FOREIGN)
VENV_DYCKBOOK := $(if $(wildcard $(PY)),$(shell $(PY) -I -c "import importlib.util as u, os; \
	s = u.find_spec('dyckbook'); print(os.path.realpath(os.path.dirname(os.path.dirname(\
	s.origin))) if s and s.origin else '')" 2>/dev/null))
VENV_FOREIGN := $(filter-out $(realpath $(CURDIR)),$(VENV_DYCKBOOK))
endif
ROOT_USER := $(filter 0,$(shell id -u))
# RERUN=all recomputes every run; RERUN="dyck1 ood" (run names, notebook keys or patterns) those
# runs only, up to date or not; an unknown name is an error of `dyckbook run`, never a no-op
# the manifest's profiles, read without python (make publish and clean-results check PROFILE
# before a venv is installed)
PROFILES = $(shell sed -n '/^profiles:/,$$p' notebooks/experiments.yml 2>/dev/null | \
	sed -n 's/^  \([A-Za-z0-9_-]*\):.*/\1/p')
RERUN_ARGS := $(if $(strip $(RERUN)),--force $(if $(filter-out all,$(strip $(RERUN))),--only $(RERUN)))

.PHONY: help venv browser mathjax runs book site publish grid book-full smoke test lint lab bench clean \
	clean-results

help:
	@echo "make book [PROFILE=cpu|smoke|thesis] [JOBS=2] [SCHEDULER=local|tcp://HOST:PORT]"
	@echo "                                run the experiments, build the book (_build/html)"
	@echo "     [RERUN=all|\"RUN ...\"]      recompute every run, or the runs named, up to date or not"
	@echo "     [DEVICE=cpu|cuda|auto]     where every run trains (cuda: as many runs at once as"
	@echo "                                fit in the card's memory; recorded, never hashed)"
	@echo "make site [PROFILE=cpu]         the book as committed: pages and build, no run"
	@echo "make publish PROFILE=cpu        checks (remote, clean tree), make site, push _build/html"
	@echo "                                to the gh-pages branch of origin"
	@echo "make book-full                  the full ablation grid (42 min on 2 cores at lengths to 16/20;"
	@echo "                                not yet timed at the stack sets' lengths, 4..48), then make book"
	@echo "make smoke                      the quick preview (PROFILE=smoke)"
	@echo "make test                       every test CI runs"
	@echo "make lab [LAB_ARGS=...]         JupyterLab on the repository (as root too)"
	@echo "make bench                      benchmarks -> benchmarks/results/*.json"
	@echo "make clean                      remove build artifacts (keeps .venv and every result)"
	@echo "make clean-results PROFILE=P    DELETE the results of profile P (book/results/P,"
	@echo "                                book/runs/P): hours of compute; other profiles kept"
	@echo "make lint                       ruff (the version pinned in pyproject.toml)"
	@echo "RUN_CACHE=.cache/runs           trained models kept there, so a stopped run resumes"
	@echo "                                (RUN_CACHE= turns it off)"
	@echo "USE_ACTIVE_ENV=1 (or VENV=)     use the active (conda) environment instead of .venv"

ifeq ($(strip $(VENV)),)
venv:
	@$(PY) -c "import dyckbook, papermill, jupyter_book" 2>/dev/null || { echo "the active \
	environment lacks dyckbook or its book extra: conda env create -f environment.yml"; exit 1; }
else
venv: $(VENV)/.installed
	$(if $(VENV_FOREIGN),@echo "warning: $(VENV) runs the dyckbook of $(VENV_FOREIGN) and not \
	this checkout's ($(CURDIR)): drop VENV= to use this checkout's .venv" >&2)

# pip is pointed at constraints.txt so torch resolves to the pinned CPU wheel, not a 5 GB CUDA build.
$(VENV)/.installed: pyproject.toml constraints.txt
	$(if $(VENV_FOREIGN),$(error make: $(VENV) has dyckbook installed from $(VENV_FOREIGN), another \
	checkout; installing this one (pip install -e) would repoint that checkout's venv here. Drop \
	VENV= (this checkout's .venv), or USE_ACTIVE_ENV=1 for an environment of your own))
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing dyckbook and its dependencies into $(VENV) (log: $(VENV)/pip.log)"
	@$(PY) -m pip install --disable-pip-version-check -q -c constraints.txt -e '.[book,dask,dev]' \
		> $(VENV)/pip.log 2>&1 || { grep -v 'is ignored: it is neither' $(VENV)/pip.log | tail -40; exit 1; }
	@touch $@
endif

# Debian's Chromium for the real-browser test of the built book (never `playwright install`).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Debian chromium for the browser test"; \
		$(if $(ROOT_USER),,sudo) apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		$(if $(ROOT_USER),,sudo) apt-get install -y -qq chromium >/dev/null; }

# MathJax 3 from the django-static-mathjax wheel, so the book renders math with no network.
mathjax: venv
	@MJ="$$($(PY) -c 'import mathjax, pathlib; print(pathlib.Path(mathjax.__file__).parent / "static/mathjax/es5")')"; \
	mkdir -p $(MATHJAX_DIR)/input/tex && cp "$$MJ/tex-svg.js" $(MATHJAX_DIR)/ && \
	rm -rf $(MATHJAX_DIR)/input/tex/extensions && cp -r "$$MJ/input/tex/extensions" $(MATHJAX_DIR)/input/tex/

runs: venv
	DYCKBOOK_RUN_CACHE=$(RUN_CACHE) $(PY) -m dyckbook run --profile $(PROFILE) --jobs $(JOBS) \
		$(RERUN_ARGS) \
		$(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(if $(DEVICE),--device $(DEVICE))

# The book of one profile: its runs that are not up to date (RERUN=all: every run; a stopped one
# resumes from the run cache), (a failed one keeps its last good results), its pages marked
# with their state, the build; `make book` still fails if a run failed, after building the book.
# The build writes _build/html/.nojekyll (sphinx.ext.githubpages): a branch deploy keeps _static.
book: venv mathjax
	@status=0; DYCKBOOK_RUN_CACHE=$(RUN_CACHE) $(PY) -m dyckbook run --profile $(PROFILE) \
		--jobs $(JOBS) $(RERUN_ARGS) \
		$(if $(SCHEDULER),--scheduler $(SCHEDULER)) $(if $(DEVICE),--device $(DEVICE)) \
		|| status=$$?; \
	if [ $$status -eq 2 ] || [ $$status -eq 130 ]; then \
		echo "make book: dyckbook run refused its arguments or was interrupted (exit $$status; \
	its error is above): nothing built" >&2; exit $$status; fi; \
	$(PY) -m dyckbook pages --profile $(PROFILE) && \
	$(BIN)jupyter-book build . -W -n --keep-going && echo "open _build/html/index.html" || exit; \
	if [ $$status -ne 0 ]; then echo "make book: the book is built, but dyckbook run failed \
	(exit $$status): its failed runs' pages are marked; see its messages above, or \
	$(PY) -m dyckbook list --profile $(PROFILE)" >&2; fi; exit $$status

# The book as committed: the profile's published results and pages (the cpu profile's are in the
# repository), each page marked with its state, built without running anything. The Pages
# workflow publishes this on every push; `make publish` pushes it from here.
site: venv mathjax
	$(PY) -m dyckbook pages --profile $(PROFILE) && \
	$(BIN)jupyter-book build . -W -n --keep-going && echo "open _build/html/index.html"

# The site as committed, onto the gh-pages branch of `origin` (GitHub Pages "deploy from a branch");
# .github/workflows/pages.yml is the other way, building on GitHub. Checked before anything is
# computed: a remote `origin` that is not a local path, a clean working tree, PROFILE named on the
# command line; each failure is one line. A failed push restores the local gh-pages branch.
ifeq ($(filter publish,$(MAKECMDGOALS)),publish)
PUBLISH_REMOTE := $(shell git remote get-url origin 2>/dev/null)
PUBLISH_PROBLEM := $(if $(PUBLISH_REMOTE),,no git remote 'origin' to push to (git remote add origin URL))
PUBLISH_PROBLEM := $(or $(PUBLISH_PROBLEM),$(if $(filter /% ./% ../% file://%,$(PUBLISH_REMOTE)),origin is a local path ($(PUBLISH_REMOTE)): publish pushes to a GitHub remote))
PUBLISH_PROBLEM := $(or $(PUBLISH_PROBLEM),$(if $(shell git status --porcelain 2>/dev/null | head -1),the working tree has uncommitted changes: commit them so the site matches a commit))
PUBLISH_PROBLEM := $(or $(PUBLISH_PROBLEM),$(if $(filter command line,$(origin PROFILE)),,name the profile: make publish PROFILE=cpu))
PUBLISH_PROBLEM := $(or $(PUBLISH_PROBLEM),$(if $(and $(filter 1,$(words $(PROFILE))),$(filter \
	$(PROFILES),$(PROFILE))),,PROFILE='$(PROFILE)' is not a profile of notebooks/experiments.yml \
	($(PROFILES))))
endif
publish:
	$(if $(PUBLISH_PROBLEM),$(error make publish: $(PUBLISH_PROBLEM)))
	$(MAKE) site PROFILE=$(PROFILE)
	@before="$$(git rev-parse -q --verify refs/heads/gh-pages)"; \
	$(BIN)ghp-import --no-jekyll --force --message "book: make publish (profile $(PROFILE))" \
		_build/html && git push --force origin gh-pages || { \
		if [ -n "$$before" ]; then git update-ref refs/heads/gh-pages "$$before"; \
		else git branch -D gh-pages >/dev/null; fi; \
		echo "make publish: the push to origin failed; the local gh-pages branch is as it was"; \
		exit 1; }

# The full ablation grid (profile `grid`: 1,800 models, one worker per core); its records are kept
# and resumed, so a rerun with unchanged settings only re-renders its page.
grid: venv
	$(PY) -m dyckbook run --profile grid $(if $(SCHEDULER),--scheduler $(SCHEDULER))

# Every number of the book including the full grid's, from the manifest, in one command.
book-full: grid
	$(MAKE) book

smoke:
	$(MAKE) book PROFILE=smoke

test: venv browser mathjax
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile

# ruff, the version pinned in pyproject.toml's dev extra (and in .pre-commit-config.yaml)
lint: venv
	$(BIN)ruff check .

# JupyterLab on the repository root (notebooks/ and book/); as root (containers, cloud
# workspaces) it needs --allow-root. Anything else: make lab LAB_ARGS="--port 8890 --no-browser"
lab: venv
	$(BIN)jupyter lab --ServerApp.root_dir=. $(if $(ROOT_USER),--allow-root) $(LAB_ARGS)

bench: venv
	@for script in benchmarks/bench_*.py; do [ $$script = benchmarks/bench_make.py ] && continue; \
		[ $$script = benchmarks/bench_gpu.py ] && continue; \
		[ $$script = benchmarks/bench_dyck3_recipe.py ] && continue; \
		[ $$script = benchmarks/bench_length_reach.py ] && continue; \
		[ $$script = benchmarks/bench_length_break.py ] && continue; \
		[ $$script = benchmarks/bench_profile_cost.py ] && continue; \
		[ $$script = benchmarks/bench_defaults.py ] && continue; \
		echo "== $$script"; $(PY) $$script || exit 1; done
	$(PY) benchmarks/table.py

clean:
	rm -rf _build $(MATHJAX_DIR) book/pages test-artifacts .pytest_cache .hypothesis build
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +

# One profile's experiment results (hours of compute): only on request, never part of `clean`,
# and only for one profile the manifest names (checked before anything is deleted: an empty,
# misspelt or two-word PROFILE is one line and exit status 2).
ifeq ($(filter clean-results,$(MAKECMDGOALS)),clean-results)
CLEAN_PROBLEM := $(if $(filter command line,$(origin PROFILE)),,name the profile whose results \
	to delete: make clean-results PROFILE=cpu)
CLEAN_PROBLEM := $(or $(CLEAN_PROBLEM),$(if $(and $(filter 1,$(words $(PROFILE))),$(filter \
	$(PROFILES),$(PROFILE))),,PROFILE='$(PROFILE)' is not a profile of notebooks/experiments.yml \
	($(PROFILES)): nothing deleted))
endif
clean-results:
	$(if $(CLEAN_PROBLEM),$(error make clean-results: $(CLEAN_PROBLEM)))
	rm -rf book/runs/$(PROFILE) book/results/$(PROFILE) book/pages
