"""Grades from nbgrader's gradebook, with what was graded by hand shown as such.

Each graded cell of a student's notebook is one of three things:

- autograded: its score is the checks' (or nbgrader's: 0 for an answer cell left as released);
- pending: a manually graded answer (a free-text "explain" question) the student wrote, not graded yet:
  its points are neither earned nor lost, and the grade is not final until someone grades it in formgrader;
- manual: a score set in formgrader. It counts, as nbgrader counts it (over the autograde, too). When the
  student resubmitted since it was set, and what it was set on changed (the answers, for a score set over a
  test cell's autograde; the answer's own text, for an answer graded by hand), the instructor is warned: the
  score may not fit the new answer.

What a manual score was set on is kept in ``<course>/lmbook_manual.json``: for every student, the key of the
notebook graded last and the text of each graded cell then (what formgrader showed), and for every manual
score, the key and the text it was given on.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from .student import Student

STATE = "lmbook_manual.json"


def task_of(grade_id: str) -> str:
    """The task a graded cell belongs to: its grade id without nbgrader's ``test_``/``hidden_`` prefix."""
    return re.sub(r"^(test|hidden)_", "", grade_id)


def load_state(course: Path) -> dict:
    try:
        state = json.loads((course / STATE).read_text())
        return state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        return {}


def save_state(course: Path, state: dict) -> None:
    tmp = course / f".{STATE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    os.replace(tmp, course / STATE)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_grades(gb, st: Student, assignment: str, notebook: str, state: dict,
                texts: dict[str, str] | None = None) -> None:
    """Fill ``st.tasks``, ``st.pending``, ``st.manual`` and ``st.warnings`` from the gradebook ``gb``.

    ``state``: this assignment's part of the state file, updated for the student. ``texts``: the graded
    notebook's graded cells by grade id (an answer graded by hand is judged by its own text).
    """
    texts = {gid: _digest(t) for gid, t in (texts or {}).items()}
    mine = state.setdefault(st.sid, {})
    key_before, texts_before = mine.get("key"), mine.get("texts", {})  # what formgrader showed since the last run
    given = mine.setdefault("manual", {})
    for cell in gb.find_notebook(notebook, assignment).grade_cells:
        g = gb.find_grade(cell.name, notebook, assignment, st.sid)
        task, maxp = task_of(cell.name), float(g.max_score)
        score, _ = st.tasks.get(task, (0.0, 0.0))
        if g.manual_score is not None:
            value = float(g.manual_score) + float(g.extra_credit or 0)
            st.manual[task] = st.manual.get(task, 0.0) + value
            record = given.get(cell.name)
            if record and record[0] == value:
                on_key, on_text = record[1], record[2] if len(record) > 2 else None
            else:  # set since the last run, on what that run graded
                on_key, on_text = key_before or st.key, texts_before.get(cell.name, texts.get(cell.name))
            given[cell.name] = [value, on_key, on_text]
            by_hand = g.auto_score is None  # an answer graded by hand: its own text is what was graded
            changed = (on_text != texts.get(cell.name)) if by_hand else on_key != st.key
            if changed:
                now = ("its answer has changed since, and needs grading again" if by_hand
                       else f"this submission's autograde is {float(g.auto_score):g}/{maxp:g}")
                st.warnings.append(f"{task}: the score {value:g}/{maxp:g} set by hand in formgrader was set on an "
                                   f"earlier submission; the student has resubmitted since ({now}). The score set "
                                   "by hand counts: change or remove it in formgrader, then run lmbook-grade again")
            score += value
        elif g.auto_score is None:  # an answer nbgrader leaves to a person
            st.pending[task] = st.pending.get(task, 0.0) + maxp
        else:
            score += float(g.auto_score) + float(g.extra_credit or 0)
            given.pop(cell.name, None)
        st.tasks[task] = (score, st.tasks.get(task, (0.0, 0.0))[1] + maxp)
    mine["key"], mine["texts"] = st.key, texts
