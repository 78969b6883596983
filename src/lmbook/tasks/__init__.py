"""The course's graded tasks: one package per exercise, each a :class:`~lmbook.grading.checks.Registry` named ``check``.

Each package (``lmbook.tasks.ch01``, ...) holds what its exercise's tasks must do, one file per task: cases,
references, comparisons, named mistakes and forbidden ready-made answers, as :class:`~lmbook.grading.checks.Check` data.
A notebook's locked set-up cell names its package (``from lmbook.tasks.ch02 import check``); the grading
engine, :mod:`lmbook.grading`, finds the checks through that line alone and knows no exercise.

A new exercise is its task package ``lmbook/tasks/chNN/`` (a file per task, and an ``__init__.py`` that lists their
checks, ``CHECKS``, and sets ``check = Registry(CHECKS)``; what several exercises share is in :mod:`.common`), its
nbgrader source notebook ``solutions/chNN/chNN_<name>.ipynb``, and its id in :data:`ASSIGNMENTS`: the Makefile, the
book's tables of contents, the tests, the sample submissions and the benchmarks all take it from there.
"""

# The released exercises, in course order (each is a folder of solutions/ and a package here).
ASSIGNMENTS: tuple[str, ...] = ("ch01", "ch02", "ch03", "ch04", "ch05", "ch06", "ch07", "ch08", "ch09", "ch10",
                               "ch11")
