"""The grading engine: declarative checks, and the hardened autograder that runs them.

It knows no exercise. Each exercise's tasks are data in their own module of :mod:`lmbook.tasks`,
which the notebook's locked set-up cell names (``from lmbook.tasks.ch02 import check``).

- :mod:`.checks`: a task's check as data (cases, reference, comparison, named mistakes), and running it
- :mod:`.static`: reads student code for tampering and for the ready-made answer
- :mod:`.rules`: the rule every exercise notebook states (the magics :mod:`.static` allows, what is flagged)
- :mod:`.runner`: the only grading code next to student code, inside the sandbox; decides nothing
- :mod:`.sandbox`: bubblewrap and limits around the runner
- :mod:`.judge`: plans a notebook's run, then decides every test cell outside the sandbox
- :mod:`.nbgrader_plugin`: the preprocessors that make ``nbgrader autograde`` do all of this
- :mod:`.feedback`: keeps hidden tests out of feedback
- :mod:`.submissions`, :mod:`.reports`, :mod:`.classreport`: ``lmbook-grade``'s input (the class's
  notebooks) and output (grades, reports, the class page)
- :mod:`.archive`: unpacking an LMS zip, each refused entry reported for its student
- :mod:`.interrupt`: stopping ``lmbook-grade`` (SIGTERM, Ctrl-C) without leaving temporary folders
"""

__all__ = ["Case", "Check", "CheckFailed", "Mutant", "Registry", "run_check"]


def __getattr__(name: str):
    # Imported on first use, as in ``lmbook``: nbgrader's steps load this package's preprocessors, not the checks.
    if name in __all__:
        from . import checks

        return getattr(checks, name)
    raise AttributeError(f"module 'lmbook.grading' has no attribute {name!r}")
