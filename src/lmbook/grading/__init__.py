"""Declarative checks for the exercises, and the hardened autograder that runs them.

- :mod:`.checks`: a task's check as data (cases, reference, comparison, named mistakes)
- :mod:`.ch01`, ...: each exercise's checks, imported by its notebook (``check("task", answer)``)
- :mod:`.static`: reads student code for tampering and for the ready-made answer
- :mod:`.runner`: the only grading code next to student code, inside the sandbox; decides nothing
- :mod:`.sandbox`: bubblewrap and limits around the runner
- :mod:`.judge`: plans a notebook's run, then decides every test cell outside the sandbox
- :mod:`.nbgrader_plugin`: the preprocessors that make ``nbgrader autograde`` do all of this
- :mod:`.feedback`: keeps hidden tests out of feedback
"""

from .checks import Case, Check, CheckFailed, Mutant, Registry, run_check

__all__ = ["Case", "Check", "CheckFailed", "Mutant", "Registry", "run_check"]
