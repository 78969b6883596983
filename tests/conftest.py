import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Not through MPLBACKEND: the kernels the tests start (book builds, notebooks) inherit the environment, and
# ipykernel shows figures inline only when MPLBACKEND is unset.
os.environ.pop("MPLBACKEND", None)
import matplotlib  # noqa: E402

matplotlib.use("Agg")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs one worker per core: one thread each, here and in every process a test starts (kernels,
    # the book build). torch's default, a thread per core in every worker, makes the workers fight for the cores.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
sys.path.insert(0, str(ROOT / "bench"))
from worktree import copy_worktree  # noqa: E402  (bench/: one copy of the tree for tests and benchmarks)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def _build(src: Path, *extra: str) -> None:
    r = subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build", str(src), "--all", "-W", "-n",
                        "--keep-going", *extra], capture_output=True, text=True)
    assert r.returncode == 0, f"book build failed:\n{r.stdout[-5000:]}\n{r.stderr[-5000:]}"


@pytest.fixture(scope="session")
def book_copy(tmp_path_factory) -> Path:
    """A copy of the repository's working tree (and the npm assets) with an empty execution cache."""
    src = copy_worktree(tmp_path_factory.mktemp("book"))
    # Cache mode on an empty cache executes every notebook (a clean build), and lets the
    # instructor edition below reuse those executions instead of running every chapter again.
    config = src / "_config.yml"
    config.write_text(re.sub(r"execute_notebooks: \w+", "execute_notebooks: cache", config.read_text()))
    return src


@pytest.fixture(scope="session")
def site(book_copy) -> Path:
    """The reader's edition, built from scratch with warnings as errors."""
    _build(book_copy)
    return book_copy / "_build" / "html"


@pytest.fixture(scope="session")
def instructor_site(site, book_copy) -> Path:
    """The instructor's edition (solutions included), built after the reader's edition."""
    out = book_copy / "_build" / "instructor"
    config = book_copy / "_config.yml"
    text = config.read_text()
    # share the reader's edition's execution cache
    config.write_text(text.replace("execute:\n", f"execute:\n  cache: {book_copy / '_build' / '.jupyter_cache'}\n", 1))
    try:
        _build(book_copy, "--toc", str(book_copy / "_toc_instructor.yml"), "--path-output", str(out))
    finally:
        config.write_text(text)
    return out / "_build" / "html"


# `make test` runs the suite on every core (pytest-xdist, --dist loadgroup). Tests that share an expensive
# fixture must land on one worker, or each worker would pay for it: the book build (session scope) and each
# module-scoped fixture (one grading batch per parameter). Every other test is scheduled on its own.
BOOK_FIXTURES = {"book_copy", "site", "instructor_site"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        if BOOK_FIXTURES & set(item.fixturenames):
            group = "book"
        else:
            defs = getattr(item, "_fixtureinfo", None)
            shared = [name for name, fixturedefs in (defs.name2fixturedefs.items() if defs else [])
                      if fixturedefs and fixturedefs[-1].scope == "module"]
            if not shared:
                continue
            params = getattr(item, "callspec", None)
            keys = [str(params.params[n]) for n in sorted(shared) if params is not None and n in params.params]
            group = "-".join([item.module.__name__, *keys])
        item.add_marker(pytest.mark.xdist_group(group))
    # The book's build is the longest job by far (about 40 minutes on 2 cores): started first, it runs beside
    # everything else; reached in the order of the files, it would start late and run on alone at the end.
    items.sort(key=lambda item: not BOOK_FIXTURES & set(item.fixturenames))
