import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT
