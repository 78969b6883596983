"""Architecture diagrams in one visual style, drawn by code with matplotlib patches.

Every architecture diagram in the book is drawn with these few primitives, so that the chapters share
one look: the same colour for the same role (attention is orange in chapter 5 and in chapter 10), the
same fonts (mathtext in Computer Modern, like the page's MathJax), the same arrows, and the same width
on the page, so that text is the same size in every diagram.

Coordinates are inches, from the bottom-left corner of the figure. Every diagram is ``WIDTH`` inches
wide and shown ``DISPLAY_PX`` pixels wide, so a 12-point label reads the same in every chapter; a
narrow drawing is centred on the canvas rather than drawn on a narrower one. A box is placed by its
centre and returns its anchors (``.left``, ``.top``, ...), so arrows join boxes by name, not by numbers::

    from lmbook.diagram import Diagram

    d = Diagram(height=1.2)
    x = d.tensor((1.0, 0.6), rows=3, cols=4, name="$X$", shape="$(n, d)$", role="input")
    att = d.box((3.5, 0.6), "self-attention", role="attention")
    d.arrow(x.right, att.left)
    d.check()  # raises if a label leaves the canvas, overflows its box, or covers another label
    d          # the last value of a cell: Jupyter shows the PNG

``lmbook.diagram_examples`` holds complete diagrams (chapter 3's encoder-decoder) to read and reuse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from io import BytesIO

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LinearSegmentedColormap, to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle
from matplotlib.path import Path
from matplotlib.text import Text

WIDTH = 7.0  # inches: every diagram is this wide
DISPLAY_PX = 700  # ... and shown this many pixels wide on the page (100 px per inch)
DPI = 200  # rendered at twice the displayed resolution, so it stays sharp on high-density screens

INK = "#222222"  # text, arrows
MUTED = "#666666"  # shape labels, frame titles
LABEL_PT, SMALL_PT = 12, 10  # the body text of the page is about 12 pt at the display width


@dataclass(frozen=True)
class Role:
    """How one kind of part is drawn: its fill, its outline."""

    face: str
    edge: str


# One colour per role, the same in every chapter (the Transformer paper's figure uses similar hues).
PALETTE: dict[str, Role] = {
    "input": Role("#f8cecc", "#b85450"),  # tokens, embeddings, positions
    "attention": Role("#ffe6cc", "#d79b00"),  # attention of every kind, its weights
    "ffn": Role("#dae8fc", "#6c8ebf"),  # feed-forward networks, MLPs, linear maps
    "norm": Role("#fff2cc", "#d6b656"),  # LayerNorm, Add & Norm
    "output": Role("#d5e8d4", "#82b366"),  # the vocabulary projection, softmax, heads
    "state": Role("#e1d5e7", "#9673a6"),  # recurrent states, context vectors, caches
    "mask": Role("#d9d9d9", "#7f7f7f"),  # masked positions (-inf before the softmax)
    "plain": Role("#ffffff", "#444444"),  # anything else
}

# Layers: frames behind boxes, arrows over boxes, text over everything.
_Z_FRAME, _Z_BOX, _Z_ARROW, _Z_TEXT = 1, 2, 3, 4


@dataclass(frozen=True)
class Box:
    """A placed rectangle: centre ``(x, y)`` and size ``w`` x ``h``, in inches."""

    x: float
    y: float
    w: float
    h: float

    @property
    def left(self) -> tuple[float, float]:
        return (self.x - self.w / 2, self.y)

    @property
    def right(self) -> tuple[float, float]:
        return (self.x + self.w / 2, self.y)

    @property
    def top(self) -> tuple[float, float]:
        return (self.x, self.y + self.h / 2)

    @property
    def bottom(self) -> tuple[float, float]:
        return (self.x, self.y - self.h / 2)

    @property
    def center(self) -> tuple[float, float]:
        return (self.x, self.y)

    def at(self, fx: float, fy: float) -> tuple[float, float]:
        """A point on or in the box: ``fx``, ``fy`` from -1 (left, bottom) to 1 (right, top)."""
        return (self.x + fx * self.w / 2, self.y + fy * self.h / 2)


def heat_cmap(role: str) -> LinearSegmentedColormap:
    """White to the role's outline colour: the colour scale of a grid of that role."""
    return LinearSegmentedColormap.from_list(role, ["#ffffff", PALETTE[role].edge])


class Diagram:
    """A canvas ``WIDTH`` inches wide and ``height`` tall, drawn on with the methods below."""

    def __init__(self, height: float, width: float = WIDTH):
        # A bare Figure, not pyplot's: the inline backend would show it a second time at the end of the cell.
        self.fig = Figure(figsize=(width, height), dpi=DPI)
        FigureCanvasAgg(self.fig)
        self.ax = self.fig.add_axes((0, 0, 1, 1))
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(0, height)
        self.ax.set_aspect("equal")
        self.ax.axis("off")
        self.width, self.height = width, height
        self._inside: list[tuple[Text, Box]] = []  # labels that must fit in their box

    # -- text ----------------------------------------------------------------------------------------------------
    def text(self, xy: tuple[float, float], s: str, size: float = LABEL_PT, color: str = INK,
             ha: str = "center", va: str = "center", **kw) -> Text:
        """Text at ``xy``; ``$...$`` parts are mathtext in Computer Modern, like the book's equations."""
        return self.ax.text(*xy, s, fontsize=size, color=color, ha=ha, va=va, math_fontfamily="cm",
                            zorder=_Z_TEXT, **kw)

    def _extent(self, artist) -> tuple[float, float]:
        """Width and height of a drawn artist, in inches."""
        bb = artist.get_window_extent(self.fig.canvas.get_renderer())
        return bb.width / self.fig.dpi, bb.height / self.fig.dpi

    # -- boxes ---------------------------------------------------------------------------------------------------
    def box(self, xy: tuple[float, float], label: str = "", role: str = "plain", w: float | None = None,
            h: float = 0.42, size: float = LABEL_PT) -> Box:
        """A rounded box centred at ``xy`` with a label; ``w=None`` fits the label with a margin."""
        t = self.text(xy, label, size=size) if label else None
        if w is None:
            w = (self._extent(t)[0] if t is not None else 0.4) + 0.3
        style = PALETTE[role]
        self.ax.add_patch(FancyBboxPatch((xy[0] - w / 2, xy[1] - h / 2), w, h,
                                         boxstyle="round,pad=0,rounding_size=0.06",
                                         fc=style.face, ec=style.edge, lw=1.3, zorder=_Z_BOX))
        b = Box(xy[0], xy[1], w, h)
        if t is not None:
            self._inside.append((t, b))
        return b

    def plus(self, xy: tuple[float, float], r: float = 0.12) -> Box:
        """The circled plus of a residual connection (or any element-wise sum)."""
        self.ax.add_patch(Circle(xy, r, fc="white", ec=INK, lw=1.2, zorder=_Z_BOX))
        self.ax.plot([xy[0] - r * 0.6, xy[0] + r * 0.6], [xy[1], xy[1]], color=INK, lw=1.2, zorder=_Z_TEXT)
        self.ax.plot([xy[0], xy[0]], [xy[1] - r * 0.6, xy[1] + r * 0.6], color=INK, lw=1.2, zorder=_Z_TEXT)
        return Box(xy[0], xy[1], 2 * r, 2 * r)

    def group(self, boxes: Sequence[Box], label: str = "", repeat: str = "", pad: float = 0.15) -> Box:
        """A light frame around ``boxes``, titled ``label`` at its top left; ``repeat="N"`` writes
        "N×" on its left, as the Transformer paper marks a block stacked N times."""
        x0 = min(b.x - b.w / 2 for b in boxes) - pad
        x1 = max(b.x + b.w / 2 for b in boxes) + pad
        y0 = min(b.y - b.h / 2 for b in boxes) - pad
        y1 = max(b.y + b.h / 2 for b in boxes) + pad + (0.25 if label else 0)
        self.ax.add_patch(FancyBboxPatch((x0, y0), x1 - x0, y1 - y0, boxstyle="round,pad=0,rounding_size=0.1",
                                         fc="#f6f6f6", ec="#b0b0b0", lw=1.0, zorder=_Z_FRAME))
        if label:
            self.text((x0 + 0.1, y1 - 0.14), label, size=SMALL_PT, color=MUTED, ha="left")
        if repeat:
            self.text((x0 - 0.08, (y0 + y1) / 2), f"${repeat}\\times$", ha="right")
        return Box((x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0)

    # -- arrows --------------------------------------------------------------------------------------------------
    def _path_arrow(self, points: Sequence[tuple[float, float]], label: str, dashed: bool, head: bool,
                    label_at: float, color: str) -> FancyArrowPatch:
        path = Path(np.asarray(points, dtype=float))
        arrow = FancyArrowPatch(path=path, arrowstyle="-|>" if head else "-", mutation_scale=11, color=color,
                                lw=1.2, linestyle=(0, (4, 3)) if dashed else "-", zorder=_Z_ARROW,
                                joinstyle="miter", capstyle="butt")
        self.ax.add_patch(arrow)
        if label:
            # On the longest segment, at `label_at` of its length, on a white patch over the line.
            segs = list(zip(points[:-1], points[1:], strict=True))
            (ax_, ay), (bx, by) = max(segs, key=lambda s: np.hypot(s[1][0] - s[0][0], s[1][1] - s[0][1]))
            self.text((ax_ + (bx - ax_) * label_at, ay + (by - ay) * label_at), label, size=SMALL_PT,
                      bbox=dict(fc="white", ec="none", pad=1.0))
        return arrow

    def arrow(self, start: tuple[float, float], end: tuple[float, float], label: str = "", dashed: bool = False,
              head: bool = True, label_at: float = 0.5, color: str = INK) -> FancyArrowPatch:
        """A straight arrow; ``label`` sits on it (on a white patch), ``label_at`` along its length."""
        return self._path_arrow([start, end], label, dashed, head, label_at, color)

    def elbow(self, start: tuple[float, float], end: tuple[float, float], first: str = "v", label: str = "",
              dashed: bool = False, head: bool = True, label_at: float = 0.5, color: str = INK) -> FancyArrowPatch:
        """An arrow with one right-angle turn: vertical first (``first="v"``) or horizontal first."""
        corner = (start[0], end[1]) if first == "v" else (end[0], start[1])
        return self._path_arrow([start, corner, end], label, dashed, head, label_at, color)

    def skip(self, start: tuple[float, float], end: tuple[float, float], out: float = 0.5, side: str = "right",
             label: str = "", color: str = INK) -> FancyArrowPatch:
        """A residual (skip) connection: from ``start`` out to one side by ``out`` inches, along, and back in
        to ``end``, around the block it skips."""
        x = (max(start[0], end[0]) + out) if side == "right" else (min(start[0], end[0]) - out)
        return self._path_arrow([start, (x, start[1]), (x, end[1]), end], label, False, True, 0.5, color)

    # -- tensors and matrices -----------------------------------------------------------------------------------
    def tensor(self, xy: tuple[float, float], rows: int, cols: int, name: str = "", shape: str = "",
               role: str = "state", cell: float = 0.16, name_side: str = "left", shape_side: str = "below") -> Box:
        """A tensor as a ``rows`` x ``cols`` block of cells centred at ``xy`` (a vector: one row or one column),
        its ``name`` and its ``shape`` (e.g. "$(n, d)$") beside it: each side is left, right, above or below,
        and on a shared side the name comes first, nearest the block."""
        style = PALETTE[role]
        w, h = cols * cell, rows * cell
        x0, y0 = xy[0] - w / 2, xy[1] - h / 2
        for i in range(rows):
            for j in range(cols):
                self.ax.add_patch(Rectangle((x0 + j * cell, y0 + (rows - 1 - i) * cell), cell, cell,
                                            fc=style.face, ec=style.edge, lw=0.8, zorder=_Z_BOX))
        b = Box(xy[0], xy[1], w, h)
        gap = {"left": 0.08, "right": 0.08, "above": 0.05, "below": 0.05}  # from the block to the next label
        for s, side, size in ((name, name_side, LABEL_PT), (shape, shape_side, SMALL_PT)):
            if not s:
                continue
            color = INK if s is name else MUTED
            if side in ("left", "right"):
                sign = -1 if side == "left" else 1
                t = self.text((xy[0] + sign * (w / 2 + gap[side]), xy[1]), s, size=size, color=color,
                              ha="right" if side == "left" else "left")
                gap[side] += self._extent(t)[0] + 0.06
            else:
                sign = -1 if side == "below" else 1
                t = self.text((xy[0], xy[1] + sign * (h / 2 + gap[side])), s, size=size, color=color,
                              va="top" if side == "below" else "bottom")
                gap[side] += self._extent(t)[1] + 0.03
        return b

    def grid(self, xy: tuple[float, float], values, role: str = "attention", cell: float = 0.32,
             row_labels: Sequence[str] = (), col_labels: Sequence[str] = (), fmt: str = "",
             masked=None, vmin: float | None = None, vmax: float | None = None) -> Box:
        """A matrix as a heat-grid centred at ``xy``: each cell coloured by its value on the role's scale
        (white to its outline colour), written in it with ``fmt`` (e.g. "{:.2f}") if given. Cells where
        ``masked`` is True, or whose value is not finite (-inf), are drawn as masked: grey and hatched.
        ``row_labels`` go on the left, ``col_labels`` above (tokens, positions)."""
        v = np.asarray(values, dtype=float)
        if v.ndim != 2:
            raise ValueError(f"grid needs a 2-d matrix, got shape {v.shape}")
        hidden = ~np.isfinite(v) if masked is None else np.asarray(masked, dtype=bool) | ~np.isfinite(v)
        shown = v[~hidden]
        lo = vmin if vmin is not None else (shown.min() if shown.size else 0.0)
        hi = vmax if vmax is not None else (shown.max() if shown.size else 1.0)
        cmap, rows, cols = heat_cmap(role), v.shape[0], v.shape[1]
        x0, y0 = xy[0] - cols * cell / 2, xy[1] - rows * cell / 2
        for i in range(rows):
            for j in range(cols):
                corner = (x0 + j * cell, y0 + (rows - 1 - i) * cell)
                if hidden[i, j]:
                    m = PALETTE["mask"]
                    self.ax.add_patch(Rectangle(corner, cell, cell, fc=m.face, ec="white", lw=1.0, hatch="///",
                                                zorder=_Z_BOX))
                    continue
                level = 0.5 if hi == lo else (v[i, j] - lo) / (hi - lo)
                face = cmap(0.08 + 0.92 * level)  # the lowest value stays visibly tinted against the page
                self.ax.add_patch(Rectangle(corner, cell, cell, fc=face, ec="white", lw=1.0, zorder=_Z_BOX))
                if fmt:
                    # dark text on light cells, white on dark ones (relative luminance)
                    lum = np.dot(to_rgb(face), (0.2126, 0.7152, 0.0722))
                    self.text((corner[0] + cell / 2, corner[1] + cell / 2), fmt.format(v[i, j]), size=SMALL_PT - 1,
                              color=INK if lum > 0.5 else "white")
        for i, s in enumerate(row_labels):
            self.text((x0 - 0.06, y0 + (rows - 1 - i) * cell + cell / 2), s, size=SMALL_PT, ha="right")
        for j, s in enumerate(col_labels):
            self.text((x0 + j * cell + cell / 2, y0 + rows * cell + 0.06), s, size=SMALL_PT, va="bottom")
        return Box(xy[0], xy[1], cols * cell, rows * cell)

    # -- checking and showing -----------------------------------------------------------------------------------
    def problems(self) -> list[str]:
        """What a reader would see as wrong: text cut off by the canvas edge, a label overflowing its box,
        two labels on top of each other. Empty when the diagram is clean."""
        renderer = self.fig.canvas.get_renderer()
        page = self.fig.bbox
        found = []
        texts = [t for t in self.ax.texts if t.get_visible() and t.get_text()]
        boxes = {id(t): t.get_window_extent(renderer) for t in texts}
        for t in texts:
            bb = boxes[id(t)]
            if bb.x0 < page.x0 - 1 or bb.x1 > page.x1 + 1 or bb.y0 < page.y0 - 1 or bb.y1 > page.y1 + 1:
                found.append(f"label {t.get_text()!r} is cut off by the edge of the canvas")
        for t, b in self._inside:
            w, h = self._extent(t)
            if w > b.w - 0.08 or h > b.h - 0.04:
                found.append(f"label {t.get_text()!r} ({w:.2f} x {h:.2f} in) overflows its box "
                             f"({b.w:.2f} x {b.h:.2f} in)")
        for i, a in enumerate(texts):
            for c in texts[i + 1:]:
                if boxes[id(a)].overlaps(boxes[id(c)]):
                    inter = (min(boxes[id(a)].x1, boxes[id(c)].x1) - max(boxes[id(a)].x0, boxes[id(c)].x0)) * \
                            (min(boxes[id(a)].y1, boxes[id(c)].y1) - max(boxes[id(a)].y0, boxes[id(c)].y0))
                    if inter > 4:  # more than touching (pixels squared)
                        found.append(f"labels {a.get_text()!r} and {c.get_text()!r} overlap")
        for p in self.ax.patches:
            bb = p.get_window_extent(renderer)
            if bb.x0 < page.x0 - 1 or bb.x1 > page.x1 + 1 or bb.y0 < page.y0 - 1 or bb.y1 > page.y1 + 1:
                found.append(f"a {type(p).__name__} is cut off by the edge of the canvas")
        return found

    def check(self) -> Diagram:
        """Raise if the diagram has any of ``problems()``; returns the diagram, so ``d.check()`` can end a cell."""
        found = self.problems()
        if found:
            raise AssertionError("the diagram is not clean:\n  " + "\n  ".join(found))
        return self

    def png(self) -> bytes:
        """The diagram as PNG bytes, ``WIDTH`` x ``height`` inches at ``DPI`` (no cropping: the width is fixed)."""
        buf = BytesIO()
        self.fig.savefig(buf, format="png", dpi=DPI, facecolor="white")
        return buf.getvalue()

    def _repr_png_(self) -> tuple[bytes, dict[str, int]]:
        # The width in the output's metadata: myst-nb and Jupyter show the image DISPLAY_PX wide, whatever its DPI.
        return self.png(), {"width": round(DISPLAY_PX * self.width / WIDTH)}

    def show(self) -> None:
        """Display the diagram (for a diagram that is not the last value of its cell)."""
        from IPython.display import display

        display(self)
