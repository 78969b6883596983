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
# Kernels (make book, make lab, the tests' book builds) must choose matplotlib's inline backend themselves:
# ipykernel does so only when MPLBACKEND is unset, and a value inherited from here or from the user's shell
# (Agg, say) leaves every figure off the page. Processes that draw without a kernel call matplotlib.use("Agg").
unexport MPLBACKEND

STAMP := $(VENV)/.installed
# pytest workers for `make test` (one per core of the 2-core machines the times in the README are for).
TEST_WORKERS ?= 2
VENDOR := .vendor/static/vendor
WIDGETS_DIST := node_modules/@jupyter-widgets/html-manager/dist

.PHONY: system-deps install book book-instructor bench-chapters bench-quick gpu-check gpu-bundle test lint lab exercises grade formgrader grade-demo bench clean

install: $(STAMP) $(VENDOR)/.done

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] >= (3, 11), "Python 3.11+ is needed, found " + sys.version' 
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_SPEC)
	$(BIN)/pip install --quiet -e ".[dev]"
	# jsonschema's optional IRI checker (rfc3987-syntax, pulled in by jupyter-events) compiles 39 grammars each
	# time nbformat is imported: 2.5 s in every grading step's process, minutes over `make test`. Nothing in
	# lmbook validates IRIs; without it jsonschema skips that format.
	$(BIN)/pip uninstall --quiet --yes rfc3987-syntax
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

# The programs the book and lab targets run; tests/test_kernels.py puts a probe in their place, to start a kernel
# with exactly the environment these targets give JupyterLab and Jupyter Book.
JUPYTER_BOOK ?= $(BIN)/jupyter-book
JUPYTER_LAB ?= $(BIN)/jupyter lab

book: install
	$(JUPYTER_BOOK) build . --all -W -n --keep-going
	@echo "Book built: $(abspath _build/html/index.html)"

# The instructor's edition: the book plus the solutions (with hidden tests). Not for publishing to students.
book-instructor: install
	$(JUPYTER_BOOK) build . --all -W -n --keep-going --toc _toc_instructor.yml --path-output _build/instructor
	@echo "Instructor edition built: $(abspath _build/instructor/_build/html/index.html)"

# Debian packages the tests need: bubblewrap (the grader's sandbox) and chromium (the browser tests).
# Installed with apt-get as root or with passwordless sudo; otherwise one line says what to run, and nothing runs.
# LMBOOK_SKIP_BROWSER_TESTS=1 drops chromium (the browser tests are then reported as skipped). The sandbox
# has no such switch: the grading tests check it.
BWRAP ?= bwrap
CHROMIUM ?= /usr/bin/chromium
system-deps:
	@missing=""; command -v $(BWRAP) >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	if [ "$(LMBOOK_SKIP_BROWSER_TESTS)" != 1 ] && [ ! -x "$(CHROMIUM)" ]; then missing="$$missing chromium"; fi; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then sudo=""; elif sudo -n true >/dev/null 2>&1; then sudo="sudo -n"; else sudo=no; fi; \
	  if [ "$$sudo" != no ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing the Debian packages:$$missing (apt-get)"; \
	    $$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq$$missing >/dev/null \
	      || { echo "apt-get could not install:$$missing" >&2; exit 1; }; \
	  else \
	    hint=""; case "$$missing" in *chromium*) hint=" (or skip the browser tests: LMBOOK_SKIP_BROWSER_TESTS=1 make test)";; esac; \
	    echo "Missing Debian packages:$$missing. Install them with \`sudo apt-get install -y$$missing\` (or \`make system-deps\` as root), then run make again$$hint." >&2; \
	    exit 1; \
	  fi; \
	fi; \
	if [ -n "$$(command -v $(BWRAP))" ] && ! err=$$($(BWRAP) --ro-bind / / --unshare-all -- true 2>&1); then \
	  echo "bubblewrap is installed but cannot create a sandbox here ($$err): user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone=1)." >&2; \
	  exit 1; \
	fi

# Regenerate the student notebooks in exercises/ from the nbgrader sources in solutions/
# (the released exercises are listed once, in lmbook.tasks.ASSIGNMENTS), after writing the grader's rule
# (lmbook.grading.rules: what costs nothing, what is flagged) into every source's introduction.
exercises: install
	$(BIN)/python -m lmbook.grading.rules solutions
	cd autograder && for a in $$($(BIN)/python -m lmbook.tasks); do \
	  $(BIN)/nbgrader generate_assignment $$a --force --log-level=WARN || exit 1; done

# system-deps first: a missing package stops the run before anything is installed or run.
test: system-deps install
	$(BIN)/ruff check src tests bench autograder book/_ext
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check src tests bench autograder book/_ext

# JupyterLab on exercises/, served from the repository's root so that each notebook's link to its chapter
# (../../book/chNN_*.md) opens; nbgrader's instructor tools are turned off (autograder/student-lab/).
# Run as root (a container), JupyterLab needs --allow-root: given, and said.
ALLOW_ROOT = $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)
lab: install
	@if [ -n "$(ALLOW_ROOT)" ]; then echo "make lab: running as root, so JupyterLab gets --allow-root: the notebooks run as root (run make lab as a user where you can)."; fi
	JUPYTER_CONFIG_PATH="$(CURDIR)/autograder/student-lab$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	  $(JUPYTER_LAB) --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/exercises $(ALLOW_ROOT) $(LAB_ARGS)

# make grade SUBMISSIONS=path/to/download [ASSIGNMENT=ch02] [OUT=grading] [TIMEOUT=300] [LMS=canvas]
#   [LATE_PENALTY=10%/day] [DUE="2026-03-01 23:59"] [PARTIAL_CREDIT=1] [GRADE_ARGS="--lms-column ..."]
# Several: ASSIGNMENT="ch01 ch02" or ASSIGNMENT=all, with SUBMISSIONS/<assignment>/<student>/...
OUT ?= grading
ASSIGNMENT ?= ch01
grade: install
	$(BIN)/lmbook-grade "$(SUBMISSIONS)" $(foreach a,$(ASSIGNMENT),--assignment $(a)) --out "$(OUT)" \
	  $(if $(TIMEOUT),--timeout $(TIMEOUT)) $(if $(LMS),--lms $(LMS)) $(if $(LATE_PENALTY),--late-penalty "$(LATE_PENALTY)") \
	  $(if $(DUE),--due "$(DUE)") $(if $(PARTIAL_CREDIT),--partial-credit) $(GRADE_ARGS)

# Grade by hand in nbgrader's formgrader (free-text answers, a score to override), on the course make grade
# wrote in $(OUT)/course; then run make grade again to bring those scores into the grades and the LMS files.
formgrader: install
	@test -f "$(OUT)/course/nbgrader_config.py" || { echo "no nbgrader course in $(OUT)/course: run make grade first" >&2; exit 1; }
	cd "$(OUT)/course" && $(BIN)/jupyter lab --LabApp.default_url=/formgrader $(ALLOW_ROOT) $(LAB_ARGS)

# Grade every exercise's sample submissions (correct, blank, partly wrong, broken) into grading-demo/.
grade-demo: install
	rm -rf grading-demo && $(BIN)/python autograder/make_samples.py grading-demo/submissions $$($(BIN)/python -m lmbook.tasks)
	$(BIN)/lmbook-grade grading-demo/submissions --assignment all --out grading-demo

# Full benchmarks (over an hour on 2 cores): BENCHMARKS.md and bench/results.json, read by the chapters' "expected"
# boxes. Fails at the end, after writing everything, when a page is over the budget of 2 minutes and 2 GiB.
bench: install
	$(BIN)/python bench/run.py

# Re-measure some chapters (new or changed) and keep the other results: make bench-chapters CHAPTERS="ch02_rnn_lm"
bench-chapters: install
	$(BIN)/python bench/run.py --chapters $(CHAPTERS)

# Every part once, at small sizes, without the book builds, into bench/quick/ (the published results are untouched).
bench-quick: install
	$(BIN)/python bench/run.py --quick

# The whole book on a CUDA GPU in one command (about 8 minutes on one H100): the tests that reach a device with
# LMBOOK_DEVICE=cuda, the grader on a sample class, every page on the GPU, and the CUDA rows of BENCHMARKS.md and
# bench/results.json, written as it goes. GPU_CHECK_ARGS=--dry-run runs its plan, small, on the CPU.
# GPU_PYTHON=python3: a Python that already has a CUDA build of torch and the packages (no set-up).
gpu-check: $(if $(GPU_PYTHON),,install)
	$(or $(GPU_PYTHON),$(BIN)/python) bench/gpu_check.py $(GPU_CHECK_ARGS)

# For a GPU machine without internet: on a machine with PyPI, Debian's archive and npm, build .gpu/ (git-ignored,
# about 19 MB): bench/gpu_bundle.txt's wheels for CPython 3.12 (GPU_BUNDLE_PYVER), Debian's bubblewrap, the npm
# assets the pages read, and bench/gpu_offline.sh, which installs them there and runs gpu_check.py. It runs
# `npm ci` itself when node_modules lacks those assets, and uses the venv's pip when there is one.
GPU_BUNDLE_PYVER ?= 3.12
gpu-bundle:
	PYVER=$(GPU_BUNDLE_PYVER) bash bench/gpu_bundle.sh .gpu

clean:
	rm -rf _build .vendor node_modules grading-demo
