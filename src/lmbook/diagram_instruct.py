"""Chapter 11's instruction- and preference-tuning diagrams, drawn with :mod:`lmbook.diagram` in the book's one style.

- :func:`response_mask`: one prompt → response pair read as a single sequence, the next-token targets below
  it, and which targets the loss counts (the response's) and which it skips (the prompt's);
- :func:`preference_tuning`: RLHF's reward model and sampling loop beside DPO's single loss on the pairs.
"""

from __future__ import annotations

from collections.abc import Sequence

from .diagram import INK, MUTED, SMALL_PT, WIDTH, Diagram


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


def _row(d: Diagram, y: float, title: str, boxes: Sequence[tuple[str, str, float]], labels: Sequence[str]):
    """A row of boxes left to right, (label, role, width), joined by labelled arrows, titled at its top left."""
    gap = (WIDTH - 0.3 - sum(w for _, _, w in boxes)) / (len(boxes) - 1)
    x, placed = 0.15, []
    for label, role, w in boxes:
        placed.append(d.box((x + w / 2, y), label, role=role, w=w, h=0.8, size=SMALL_PT))
        x += w + gap
    for a, b, text in zip(placed[:-1], placed[1:], labels, strict=True):
        d.arrow(a.right, b.left, label=text)
    d.text((0.15, y + 0.65), title, size=SMALL_PT, color=MUTED, ha="left")
    return placed


def preference_tuning() -> Diagram:
    """RLHF (top) and DPO (bottom) from the same start: the reference model's samples, judged in pairs. RLHF fits a
    reward model to the pairs, then trains the policy by sampling from it and scoring each sample, step after step
    (the loop), held near the reference by a KL penalty; DPO trains the policy on the pairs directly, with one loss
    in which the reference's log-probabilities and β do that holding, and no sampling while it trains."""
    d = Diagram(height=3.9)
    rl = _row(d, 2.75, "RLHF (InstructGPT): fit a reward model, then reinforcement learning",
              [("samples\nof $\\pi_\\text{ref}$", "input", 0.95), ("judge ranks\npairs", "plain", 1.0),
               ("reward\nmodel $r_\\phi$", "ffn", 1.0),
               ("PPO: sample $\\pi_\\theta$,\nscore with $r_\\phi$,\n$-\\beta$ KL to $\\pi_\\text{ref}$", "state",
                1.7)],
              ["", "pairs", ""])
    ppo = rl[-1]
    out, back = ppo.at(0.85, -1), ppo.at(-0.85, -1)  # each step samples anew from the policy it trains
    d._path_arrow([out, (out[0], ppo.y - 0.75), (back[0], ppo.y - 0.75), back], "update, sample again",
                  False, True, 0.5, INK)
    _row(d, 0.6, "DPO: one loss on the pairs; no reward model, no sampling while training",
         [("samples\nof $\\pi_\\text{ref}$", "input", 0.95), ("judge ranks\npairs", "plain", 1.0),
          ("DPO loss: log-probs\nof $\\pi_\\theta$ and $\\pi_\\text{ref}$, $\\beta$", "output", 1.7),
          ("tuned\n$\\pi_\\theta$", "plain", 0.75)],
         ["", "pairs", ""])
    return d.check()
