"""What exercise 8's tasks share: the forbidden modules and names."""

from __future__ import annotations

from ..common import COURSE, COURSE_ATTRS

MODULES = (*COURSE, "lmbook.transformer")
ATTRS = (*COURSE_ATTRS, "transformer")
