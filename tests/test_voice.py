"""A textbook's voice: no internal vocabulary, no visible bookkeeping call, no code line cut off by the page.

Read from the pages' sources, so that each message names the file and line to fix. What a reader sees: the
prose, and the code of every cell not tagged remove-input or remove-cell (hide-input code is one click away).
The rendered width of code blocks is checked in the browser (tests/test_browser.py).
"""

import re
from pathlib import Path

import pytest
from page_source import Line, page_lines

ROOT = Path(__file__).resolve().parent.parent
TOC = (ROOT / "_toc.yml").read_text()
PAGES = [f"{name}.md" for name in re.findall(r"(?:file|root): (book/\S+)", TOC)] + sorted(
    str(p.relative_to(ROOT)) for pattern in re.findall(r"glob: (\S+)", TOC) for p in ROOT.glob(pattern + ".ipynb"))

# Calls that hand numbers to the text or compare them with the benchmarks: bookkeeping, never the lesson.
BOOKKEEPING_CALL = re.compile(r"\b(publish|expected_box|glue)\(")
# Words of the project's workshop, not of a textbook.
INTERNAL_WORDS = re.compile(r"seeds of this course|lecture notes?|benchmarks? re-?run|LMBOOK_SEED|\bpublish\b",
                            re.IGNORECASE)
# The set-up cell may import the publishing helper with no word about it (the calls themselves are hidden).
ALLOWED_IMPORT = re.compile(r"^\s*from lmbook\.publish import publish\s*$")
# The longest code line the page shows in full (the column holds about 90 monospace characters).
MAX_CODE_LINE = 88


def voice_offences(lines: list[Line]) -> list[str]:
    found = []
    for line in lines:
        if line.kind == "hidden-code":
            continue
        if line.kind == "code" and (m := BOOKKEEPING_CALL.search(line.text)):
            found.append(f"{line.where}: a visible bookkeeping call {m.group(0)!r}: {line.text.strip()}")
        elif (m := INTERNAL_WORDS.search(line.text)) and not ALLOWED_IMPORT.match(line.text):
            found.append(f"{line.where}: internal word {m.group(0)!r}: {line.text.strip()}")
        if line.kind == "code" and len(line.text) > MAX_CODE_LINE:
            found.append(f"{line.where}: code line of {len(line.text)} characters (at most {MAX_CODE_LINE}): "
                         f"{line.text.strip()[:60]}...")
    return found


@pytest.mark.parametrize("page", PAGES)
def test_page_speaks_as_a_textbook(page):
    # Exercises too: the site shows each notebook as a page, and a line cut off there is a signature or a
    # check a student cannot read whole.
    found = voice_offences(page_lines(ROOT, page))
    assert not found, f"{len(found)} lines of {page} a reader should not see:\n" + "\n".join(found)


def _lines(text: str, kind: str = "code") -> list[Line]:
    return [Line(f"p.md:{i}", t, kind) for i, t in enumerate(text.splitlines(), start=1)]


def test_visible_publish_and_expected_box_calls_are_named_with_their_line():
    found = voice_offences(_lines("x = 1\npublish(loss=x)\nexpected_box(RESULTS, 'ch05', 'k', x, device)"))
    assert found[0].startswith("p.md:2: a visible bookkeeping call 'publish('")
    assert found[1].startswith("p.md:3: a visible bookkeeping call 'expected_box('")


def test_hidden_bookkeeping_is_fine():
    assert voice_offences(_lines("publish(loss=x)\nglue('a', 1)", kind="hidden-code")) == []


def test_internal_words_in_prose_are_named():
    found = voice_offences(_lines("As the lecture notes say, the seeds of this course rerun.", kind="prose"))
    assert found == ["p.md:1: internal word 'lecture notes': As the lecture notes say, the seeds of this course rerun."]


def test_the_set_up_import_is_allowed_but_not_its_explanation():
    assert voice_offences(_lines("from lmbook.publish import publish")) == []
    assert voice_offences(_lines("from lmbook.publish import publish  # publish(name=value) hands a number"))


def test_published_papers_are_not_bookkeeping():
    assert voice_offences(_lines("The Transformer was published in 2017.", kind="prose")) == []


def test_long_code_lines_are_named_with_their_length():
    (found,) = voice_offences(_lines("y = " + "x + " * 30 + "x"))
    assert found.startswith("p.md:1: code line of 125 characters (at most 88)")


def test_page_source_reads_tags_from_both_cell_syntaxes(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("---\njupytext: {}\n---\n# T\n\n```{code-cell} ipython3\n:tags: [remove-cell]\npublish(a=1)\n```\n"
                    "\n```{code-cell} ipython3\n---\ntags: [remove-input]\n---\nexpected_box(1)\n```\n"
                    "```{code-cell} ipython3\n---\ntags: [hide-input]\n---\nglue('x', 1)\n```\n")
    lines = page_lines(tmp_path, "p.md")
    kinds = {line.text: (line.kind, line.where) for line in lines}
    assert kinds["publish(a=1)"] == ("hidden-code", "p.md:8")
    assert kinds["expected_box(1)"][0] == "hidden-code"
    assert kinds["glue('x', 1)"][0] == "code", "hide-input code is one click away: shown"
    assert "jupytext: {}" not in kinds, "the front matter is not on the page"
