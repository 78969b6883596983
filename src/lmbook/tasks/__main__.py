"""``python -m lmbook.tasks`` prints the released exercises' ids, for the Makefile."""

from . import ASSIGNMENTS

print(" ".join(ASSIGNMENTS))
