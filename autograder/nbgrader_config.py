"""nbgrader configuration of the lmbook course.

Run nbgrader from this folder (the Makefile and ``lmbook-grade`` do):
the sources are the notebooks in ../solutions, the student versions are
written to ../exercises. ``lmbook-grade`` reuses this file for a class's
submissions, with its own course root in the output folder.
"""

import os

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import ClearHiddenTests, GetGrades

from lmbook.grading.feedback import HideHiddenTestTracebacks
from lmbook.grading.nbgrader_plugin import autograde_preprocessors, sanitize_preprocessors

c = get_config()  # noqa: F821 - injected by traitlets when nbgrader loads this file

c.CourseDirectory.course_id = "lmbook"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.source_directory = "../solutions"
c.CourseDirectory.release_directory = "../exercises"

# The student's stub: a clear failure until they write their answer.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# generate_assignment must not need a database of students.
c.GenerateAssignment.create_assignment = True

# Hardened autograding (lmbook.grading.nbgrader_plugin): only the answers are taken from a submission;
# student code runs in a bubblewrap sandbox; test cells are decided outside it. `nbgrader autograde`
# refuses to run without bubblewrap unless LMBOOK_NO_SANDBOX=1.
c.Autograde.sanitize_preprocessors = sanitize_preprocessors()
c.Autograde.autograde_preprocessors = autograde_preprocessors()
# Training tasks take seconds to a minute; a hung cell is stopped and graded 0.
c.SandboxedExecute.timeout = 300

# Feedback shows what failed and why, but never the hidden tests' code (nor tracebacks quoting it).
c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTestTracebacks, ClearHiddenTests, CSSHTMLHeaderPreprocessor]
