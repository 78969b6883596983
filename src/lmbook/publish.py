"""Publish the numbers a chapter's text quotes, without showing the reader the bookkeeping.

The chapters compute every number their prose quotes (nothing is typed in by hand) and hand it to
myst-nb's ``glue``, which the text reads back with roles such as ``{glue:text}`best_ppl:.2f```; the
benchmarks read the same values, by name, from the executed notebook. A run of
``glue(name, value, display=False)`` lines is noise to a reader who came for the experiment, so a
chapter calls ``publish(name=value, ...)`` once instead, usually in a cell tagged ``remove-cell``
right after the experiment it reports on.
"""

from __future__ import annotations

from typing import Any


def publish(**values: Any) -> None:
    """Glue each keyword argument under its own name, without displaying it.

    ``publish(best_ppl=ppl, best_m=m)`` does what ``glue("best_ppl", ppl, display=False)`` followed by
    ``glue("best_m", m, display=False)`` does. A name built at run time goes in as
    ``publish(**{name: value})``. Positional arguments are a TypeError: every value needs its name.
    """
    from myst_nb import glue  # imported here, so that `import lmbook` never needs the book's extras

    for name, value in values.items():
        glue(name, _plain(value), display=False)


def _plain(value: Any) -> Any:
    """A NumPy scalar or a one-element tensor as the Python number it holds. The text formats what glue stored,
    the value's repr: ``np.float64(1.03)`` is not a number to ``{glue:text}`x:.2f```, ``1.03`` is."""
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return value.item()
    return value
