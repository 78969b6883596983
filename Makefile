# lmbook: every target sets itself up from a fresh clone (venv, Python packages, npm assets).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
# CPU wheel by default; GPU users: make TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128" book
TORCH_SPEC ?= torch==2.13.0
# nbgrader runs `alembic` (and Jupyter its kernels) by name: the venv's bin must come first.
export PATH := $(BIN):$(PATH)
export PYTHONHASHSEED := 0
export MPLBACKEND := Agg

STAMP := $(VENV)/.installed
VENDOR := .vendor/static/vendor
WIDGETS_DIST := node_modules/@jupyter-widgets/html-manager/dist
ASSIGNMENTS := ch01 ch02 ch03 ch04

.PHONY: system-deps install book book-instructor bench-chapters bench-quick test lint lab exercises grade grade-demo bench clean

install: $(STAMP) $(VENDOR)/.done

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] >= (3, 11), "Python 3.11+ is needed, found " + sys.version' 
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_SPEC)
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

# Pinned by package-lock.json; copied into the site so built pages load nothing from the internet.
$(VENDOR)/.done: package.json package-lock.json book/_js/widgets-require-config.js
	npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	rm -rf .vendor && mkdir -p $(VENDOR)/html-manager
	cp -r node_modules/mathjax/es5 $(VENDOR)/mathjax
	cp node_modules/requirejs/require.js $(VENDOR)/require.js
	cp book/_js/widgets-require-config.js $(VENDOR)/
	cp $(WIDGETS_DIST)/embed-amd.js $(WIDGETS_DIST)/*.woff* $(WIDGETS_DIST)/*.ttf $(WIDGETS_DIST)/*.eot $(WIDGETS_DIST)/*.svg $(VENDOR)/html-manager/
	touch $@

book: install
	$(BIN)/jupyter-book build . --all -W -n --keep-going
	@echo "Book built: $(abspath _build/html/index.html)"

# The instructor's edition: the book plus the solutions (with hidden tests). Not for publishing to students.
book-instructor: install
	$(BIN)/jupyter-book build . --all -W -n --keep-going --toc _toc_instructor.yml --path-output _build/instructor
	@echo "Instructor edition built: $(abspath _build/instructor/_build/html/index.html)"

# Debian packages the project needs: bubblewrap (the grader's sandbox) and chromium (the browser test).
system-deps:
	@missing=""; command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "missing Debian packages:$$missing (install them with your package manager)" >&2; exit 1; fi; \
	fi

# Regenerate the student notebooks in exercises/ from the nbgrader sources in solutions/.
exercises: install
	cd autograder && for a in $(ASSIGNMENTS); do $(BIN)/nbgrader generate_assignment $$a --force --log-level=WARN || exit 1; done

test: install
	$(BIN)/ruff check src tests bench autograder book/_ext
	$(BIN)/pytest $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check src tests bench autograder book/_ext

lab: install
	$(BIN)/jupyter lab exercises/

# make grade SUBMISSIONS=path/to/submissions [ASSIGNMENT=ch02] [OUT=grading]
OUT ?= grading
ASSIGNMENT ?= ch01
grade: install
	$(BIN)/lmbook-grade $(SUBMISSIONS) --assignment $(ASSIGNMENT) --out $(OUT)

# Grade the sample submissions (correct, blank, partly wrong, broken) into grading-demo/.
grade-demo: install
	rm -rf grading-demo && $(BIN)/python autograder/make_samples.py grading-demo/submissions
	$(BIN)/lmbook-grade grading-demo/submissions --out grading-demo

# Full benchmarks (about 20 minutes): BENCHMARKS.md and bench/results.json, read by the chapters' "expected" boxes.
bench: install
	$(BIN)/python bench/run.py

# Re-measure some chapters (new or changed) and keep the other results: make bench-chapters CHAPTERS="ch02_rnn_lm"
bench-chapters: install
	$(BIN)/python bench/run.py --chapters $(CHAPTERS)

# Under 5 minutes, into bench/quick/ (the published results are untouched).
bench-quick: install
	$(BIN)/python bench/run.py --quick

clean:
	rm -rf _build .vendor node_modules grading-demo
