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

The package itself imports nothing, and defines no module ``__getattr__``: nbgrader's steps load
:mod:`.nbgrader_plugin` without torch or the checks (import ``Check``, ``Registry``... from :mod:`.checks`), and
a library that probes a module's attributes while an answer runs (``torch.compile``'s tracer does) must not
run the grader's code under the answer's call.
"""
