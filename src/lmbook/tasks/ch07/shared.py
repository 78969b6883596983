"""What exercise 7's tasks share: θ_i, and the forbidden ready-made answers."""

from __future__ import annotations

from ... import positions as _course_positions
from ..common import COURSE, COURSE_ATTRS

_P = _course_positions


BASE = 10000.0
FORBIDDEN = dict(
    forbidden=(_P.sinusoidal, _P.rope, _P.alibi_slopes, _P.alibi_bias, _P.RelativePositionBias, _P.shift_matrix,
               _P.frequencies),
    forbidden_attrs=(*COURSE_ATTRS, "positions", "sinusoidal", "rope", "alibi_slopes", "alibi_bias",
                     "RelativePositionBias", "shift_matrix"),
    forbidden_modules=(*COURSE, "lmbook.positions"),
)


def theta_of(i: int, d: int) -> float:
    return BASE ** (-2 * i / d)
