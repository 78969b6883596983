"""Declarative checks for the exercises (see :mod:`lmbook.grading.checks`)."""

from .checks import Case, Check, CheckFailed, Mutant, Registry, run_check

__all__ = ["Case", "Check", "CheckFailed", "Mutant", "Registry", "run_check"]
