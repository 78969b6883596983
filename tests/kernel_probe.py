"""Stands in for JupyterLab or Jupyter Book in a make target: starts a kernel as they do, draws a plot in it,
and writes what the plot output (its MIME types) and the kernel's MPLBACKEND to the JSON file named first.

    make -o .venv/.installed -o .vendor/static/vendor/.done lab JUPYTER_LAB="python tests/kernel_probe.py out.json"

Both start their kernels with jupyter_client, which gives the kernel the environment of the process that
starts it (plus the kernel spec's): the environment the make target gave them.
"""

import json
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

PLOT = "import os\nimport matplotlib.pyplot as plt\nplt.plot([0, 1], [1, 0])\nprint(os.environ.get('MPLBACKEND'))"

if __name__ == "__main__":
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PLOT)])
    NotebookClient(nb, kernel_name="python3").execute()
    outputs = nb.cells[0].outputs
    mimes = sorted({mime for out in outputs for mime in out.get("data", {})})
    backend = "".join(out.get("text", "") for out in outputs if out.get("output_type") == "stream").strip()
    Path(sys.argv[1]).write_text(json.dumps({"mimes": mimes, "kernel_MPLBACKEND": backend}))
