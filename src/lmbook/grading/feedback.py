"""An nbgrader feedback preprocessor that keeps hidden tests hidden.

nbgrader's ``ClearHiddenTests`` removes the hidden test *source* from
feedback, but an error in that cell (say a ``NameError`` because the answer
cell had a syntax error) carries IPython's traceback, which quotes the
hidden lines. This preprocessor, run before ``ClearHiddenTests``, reduces
such tracebacks to the error's one-line message.
"""

from __future__ import annotations

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool


class HideHiddenTestTracebacks(Preprocessor):
    enabled = Bool(True).tag(config=True)  # nbconvert preprocessors are off unless enabled
    marker = "### BEGIN HIDDEN TESTS"

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and self.marker in cell.source:
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    if any("✗" in line for line in out.get("traceback", [])):
                        continue  # a check's own message: written for the student, shows no code
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
        return cell, resources
