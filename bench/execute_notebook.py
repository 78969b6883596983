"""Execute one chapter notebook in a fresh kernel and print what it measured, as JSON.

    python bench/execute_notebook.py book/ch01_feedforward_lm.md

Runs in its own process so that the kernel is its only child: RUSAGE_CHILDREN then gives the
kernel's peak resident memory and its CPU time (user + system, every thread) for this run alone. On a GPU, a
last cell, added here and removed before anything is read, asks torch for the most GPU memory its allocator
held (``torch.cuda.max_memory_reserved``). The chapter's glued values (myst-nb `glue`, the numbers its text
quotes) are returned too, so benchmarks report the chapter's own results, and the number of figures
(image/png outputs) the page showed.
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


# Run after the page's last cell: None where the page used no GPU.
GPU_PROBE = """import sys as _sys
_torch = _sys.modules.get("torch")
print("LMBOOK_GPU_PEAK_MIB", _torch.cuda.max_memory_reserved() / 2**20
      if _torch is not None and _torch.cuda.is_available() and _torch.cuda.is_initialized() else None)"""


def gpu_peak_mib(probe_cell) -> float | None:
    """What the probe printed: the GPU allocator's peak in MiB, or None (no GPU used, or nothing printed)."""
    text = "".join(o.get("text", "") for o in probe_cell.get("outputs", []) if o.get("output_type") == "stream")
    for line in text.splitlines():
        if line.startswith("LMBOOK_GPU_PEAK_MIB "):
            value = line.split(None, 1)[1].strip()
            return None if value == "None" else float(value)
    return None


def main(path: Path) -> dict:
    nb = (read_myst_markdown_notebook(path.read_text()) if path.suffix == ".md"
          else nbformat.read(path, as_version=4))
    # The kernel inherits this environment, and ipykernel shows figures inline (as the book does, a cost the run
    # should include) only when MPLBACKEND is unset: a value from the caller's shell would leave them out.
    os.environ.pop("MPLBACKEND", None)
    nb.cells.append(nbformat.v4.new_code_cell(GPU_PROBE))
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    seconds = time.perf_counter() - start
    kernel = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_mib = kernel.ru_maxrss / 1024  # KiB on Linux
    probe = nb.cells.pop()  # the probe, before anything below reads the page's own cells
    figures = sum("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))
    return {"seconds": seconds, "cpu_seconds": kernel.ru_utime + kernel.ru_stime, "peak_rss_mib": peak_mib,
            "gpu_peak_mib": gpu_peak_mib(probe), "figures": figures, "glue": glued_values(nb)}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
