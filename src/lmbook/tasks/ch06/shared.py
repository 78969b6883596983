"""What exercise 6's tasks share: the forbidden ready-made answers, and the exact comparison."""

from __future__ import annotations

from ...grading.compare import describe_tensor_mismatch
from ..common import COURSE, COURSE_ATTRS, TORCH_ATTENTION, TORCH_ATTENTION_ATTRS

FORBIDDEN = dict(forbidden=TORCH_ATTENTION, forbidden_attrs=(*COURSE_ATTRS, *TORCH_ATTENTION_ATTRS),
                 forbidden_modules=COURSE)


def exact_compare(out, ref) -> str | None:
    # the values are the input's own, moved: nothing is computed, so they must match to rounding
    return describe_tensor_mismatch(out, ref, rtol=1e-6, atol=1e-7, dim=None)
