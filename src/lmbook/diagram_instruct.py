"""Chapter 11's instruction-tuning diagram, drawn with :mod:`lmbook.diagram` in the book's one style.

- :func:`response_mask`: one prompt → response pair read as a single sequence, the next-token targets below
  it, and which targets the loss counts (the response's) and which it skips (the prompt's).
"""

from __future__ import annotations

from collections.abc import Sequence

from .diagram import MUTED, SMALL_PT, Diagram


def response_mask(prompt: Sequence[str] = ("<plural>", "a", "dog", "runs", ".", "<answer>"),
                  response: Sequence[str] = ("some", "dogs", "run", ".")) -> Diagram:
    """Top row: the model's input w_1 … w_{n−1}; bottom row: its targets w_2 … w_n, each under the position that
    predicts it. A target inside the response is counted by the loss (output colour), a target inside the prompt
    is not (the masked colour)."""
    tokens = [*prompt, *response]
    d = Diagram(height=2.25)
    # each column as wide as its longer label (about 0.09 in a character at 10 pt), centred on the canvas
    widths = [0.09 * max(len(a), len(b)) + 0.22 for a, b in zip(tokens[:-1], tokens[1:], strict=True)]
    gap = 0.06
    left = (7.0 - sum(widths) - gap * (len(widths) - 1)) / 2
    x, split = left, left
    for t, w in enumerate(widths):
        top = d.box((x + w / 2, 1.55), tokens[t], role="input", w=w, h=0.38, size=SMALL_PT)
        counted = t + 1 >= len(prompt)
        if t + 1 == len(prompt):
            split = x - gap / 2
        bottom = d.box((x + w / 2, 0.75), tokens[t + 1], role="output" if counted else "mask", w=w, h=0.38,
                       size=SMALL_PT)
        d.arrow(top.bottom, bottom.top)
        x += w + gap
    right = x - gap
    d.text((3.5, 2.05), "input: prompt, then response, one sequence", size=SMALL_PT, color=MUTED)
    d.text(((left + split) / 2, 0.3), "targets in the prompt: not counted", size=SMALL_PT, color=MUTED)
    d.text(((split + right) / 2, 0.3), "response: counted", size=SMALL_PT, color=MUTED)
    return d.check()
