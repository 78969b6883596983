"""The course's graded tasks: one module per exercise, each a :class:`~lmbook.grading.Registry` named ``check``.

Each module (``lmbook.tasks.ch01``, ...) holds what its exercise's tasks must do: cases, references,
comparisons, named mistakes and forbidden ready-made answers, as :class:`~lmbook.grading.Check` data.
A notebook's locked set-up cell names its module (``from lmbook.tasks.ch02 import check``); the grading
engine, :mod:`lmbook.grading`, finds the checks through that line alone and knows no exercise.

A new exercise is its task module ``lmbook/tasks/chNN.py``, its nbgrader source notebook
``solutions/chNN/chNN_<name>.ipynb``, and its id in :data:`ASSIGNMENTS`: the Makefile, the book's
tables of contents, the tests, the sample submissions and the benchmarks all take it from there.
"""

# The released exercises, in course order (each is a folder of solutions/ and a module here).
ASSIGNMENTS: tuple[str, ...] = ("ch01", "ch02", "ch03", "ch04", "ch05", "ch06", "ch07", "ch08", "ch09", "ch10")
