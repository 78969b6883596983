"""One mistake, one task: while a later task's answer runs, the earlier tasks' functions it calls are right ones.

A task's statement may let the answer call the student's own function of an earlier task (``cross_entropy``
calling ``log_softmax``). Graded as written, one slip would cost both tasks. A :class:`~.checks.Check` lists
the earlier functions it builds on (``builds_on``: the name the statement gives each, and a right version); for
as long as the answer runs, each of those names in the answer's module namespace that holds a function of the
student's is bound to the right version, and put back afterwards. The name the statement gives is the one
replaced, wherever the answer's helpers look it up (they share the notebook's namespace); a function the
answer reaches by another name is the answer's own code, graded with it.

The watch (:mod:`.watch`) lets the answer call these right versions (they are the grader's code) only while
the later task runs; in the earlier task's own check they are ready-made answers like any other.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Sequence


def in_place_of(own: Callable, right: Callable) -> Callable:
    """``right`` for the calls the statement's signature admits; the student's ``own`` for a call it does not (their
    function takes an argument of their own, and their later task passes it): never a TypeError of the grader's."""
    signature = inspect.signature(right)

    def earlier_task(*args, **kwargs):
        try:
            signature.bind(*args, **kwargs)
        except TypeError:
            return own(*args, **kwargs)
        return right(*args, **kwargs)

    return earlier_task


class EarlierTasks:
    """Bind ``stand_ins`` (``(name, function)`` pairs) in ``answer``'s globals while the answer runs."""

    def __init__(self, answer: Callable, stand_ins: Sequence[tuple[str, Callable]]):
        self.space = getattr(answer, "__globals__", None)
        self.answer = answer
        self.stand_ins = stand_ins
        self.replaced: dict[str, tuple[Callable, Callable]] = {}

    def __enter__(self) -> EarlierTasks:
        if not isinstance(self.space, dict):
            return self
        for name, right in self.stand_ins:
            own = self.space.get(name)
            # the student's own function (not the answer itself, not torch's op imported under that name)
            if isinstance(own, types.FunctionType) and own is not self.answer:
                self.replaced[name] = own, in_place_of(own, right)
                self.space[name] = self.replaced[name][1]
        return self

    def __exit__(self, *exc) -> None:
        for name, (own, put) in self.replaced.items():
            if self.space.get(name) is put:  # not if the answer bound the name to something else
                self.space[name] = own
        self.replaced = {}
