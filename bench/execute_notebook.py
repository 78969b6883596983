"""Execute one chapter notebook in a fresh kernel and print what it measured, as JSON.

    python bench/execute_notebook.py book/ch01_feedforward_lm.md

Runs in its own process so that the kernel is its only child: RUSAGE_CHILDREN then gives the
kernel's peak resident memory for this run alone. The chapter's glued values (myst-nb `glue`,
the numbers its text quotes) are returned too, so benchmarks report the chapter's own results, and the
number of figures (image/png outputs) the page showed.
"""

from __future__ import annotations

import ast
import json
import os
import resource
import sys
import time
from pathlib import Path

import nbformat
from myst_nb.core.read import read_myst_markdown_notebook
from nbclient import NotebookClient


def glued_values(nb) -> dict:
    values = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            scrap = out.get("metadata", {}).get("scrapbook", {})
            name = scrap.get("name")
            text = out.get("data", {}).get(scrap.get("mime_prefix", "") + "text/plain")
            if name and text is not None:
                try:
                    values[name] = ast.literal_eval(text)
                except (ValueError, SyntaxError):
                    values[name] = text.strip("'\"")
    return values


def main(path: Path) -> dict:
    nb = (read_myst_markdown_notebook(path.read_text()) if path.suffix == ".md"
          else nbformat.read(path, as_version=4))
    # The kernel inherits this environment, and ipykernel shows figures inline (as the book does, a cost the run
    # should include) only when MPLBACKEND is unset: a value from the caller's shell would leave them out.
    os.environ.pop("MPLBACKEND", None)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    seconds = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
    figures = sum("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))
    return {"seconds": seconds, "peak_rss_mib": peak_mib, "figures": figures, "glue": glued_values(nb)}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
