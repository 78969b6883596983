"""Plotting helpers: consistent figures, and interactive figures that need no kernel.

An interactive figure here is a set of *precomputed* images in an ipywidgets
``Stack``, whose ``selected_index`` is ``jslink``-ed to a slider. The link runs
in the browser, so the figure responds on the static HTML page with no Python
behind it, and just the same in Jupyter.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence

import matplotlib

if matplotlib.get_backend().lower() in ("agg", ""):
    matplotlib.use("Agg")
import ipywidgets as widgets
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from .train import History


def plot_history(histories: dict[str, History], ax=None, metric: str = "val", log_y: bool = False):
    """Plot one loss curve per named history (per-epoch ``val`` or ``train`` loss, in nats)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    for name, h in histories.items():
        values = getattr(h, metric)
        ax.plot(range(1, len(values) + 1), values, marker="o", label=name)
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
    ax.set_ylabel(f"{'validation' if metric == 'val' else 'training'} cross-entropy (nats)")
    if log_y:
        ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    return ax


def figure_to_png(fig) -> bytes:
    """Render a matplotlib figure to PNG bytes and close it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def slider_figure(draw: Callable[[object], object], values: Sequence, description: str = "value") -> widgets.VBox:
    """An interactive figure that works without a kernel.

    ``draw(value)`` must return a matplotlib figure; it is called once per value
    now, and the images are shown one at a time as the slider moves.
    """
    values = list(values)
    if not values:
        raise ValueError("slider_figure needs at least one value")
    images = [widgets.Image(value=figure_to_png(draw(v)), format="png") for v in values]
    stack = widgets.Stack(images, selected_index=0)
    slider = widgets.SelectionSlider(options=[str(v) for v in values], index=0,
                                     description=description, continuous_update=True,
                                     style={"description_width": "initial"},
                                     layout=widgets.Layout(width="420px"))
    # "index" is the synced trait of a SelectionSlider ("value" lives only in Python)
    widgets.jslink((slider, "index"), (stack, "selected_index"))
    return widgets.VBox([slider, stack])
