"""Plotting helpers: consistent figures, and interactive figures that need no kernel.

An interactive figure here is a set of *precomputed* images in an ipywidgets
``Stack``, whose ``selected_index`` is ``jslink``-ed to a slider or dropdown. The link runs
in the browser, so the figure responds on the static HTML page with no Python
behind it, and just the same in Jupyter.
"""

from __future__ import annotations

import base64
import html
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


def png_widget(png: bytes, alt: str) -> widgets.HTML:
    """A PNG image as a widget, with its alt text.

    An ``<img>`` in an HTML widget rather than ``widgets.Image``: an Image has no alt attribute, and giving it
    a tooltip instead stops the static page's widget manager from drawing it at all (html-manager 1.0.7 reads
    the tooltip's ``description``, which an Image does not have).
    """
    data = base64.b64encode(png).decode("ascii")
    return widgets.HTML(f"<img src='data:image/png;base64,{data}' alt='{html.escape(alt)}' "
                        "style='display:block;max-width:100%;height:auto'>")


def _control(name: str, values: list) -> widgets.ValueWidget:
    """A slider for numbers, a dropdown for anything else; both sync their ``index`` to the browser."""
    layout = widgets.Layout(width="420px")
    style = {"description_width": "initial"}
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return widgets.SelectionSlider(options=[str(v) for v in values], index=0, description=name,
                                       continuous_update=True, style=style, layout=layout)
    return widgets.Dropdown(options=[str(v) for v in values], index=0, description=name, style=style, layout=layout)


def interactive_figure(draw: Callable[..., object], params: dict[str, Sequence], *, alt: str = "",
                       live: bool = False) -> widgets.Box:
    """An interactive figure of one or two parameters that works without a kernel.

    ``params`` maps each parameter's name to its values; ``draw(*values)`` returns a
    matplotlib figure. Every combination is drawn now, and jslink'ed controls pick
    which image shows, in the browser: the figure responds on the static HTML page.
    With two parameters, an outer ``Stack`` (first control) holds one inner ``Stack``
    per first value (second control). ``live=True`` instead returns an ipywidgets
    ``interactive`` that redraws in a running kernel (no precomputation).
    ``alt``: what the figure shows, for a reader who cannot see it; each image's alt text is it with the values
    the image is drawn for.
    """
    if not 1 <= len(params) <= 2:
        raise ValueError(f"interactive_figure takes one or two parameters, got {len(params)}")
    names = list(params)
    values = [list(params[n]) for n in names]
    if any(len(v) == 0 for v in values):
        raise ValueError("every parameter needs at least one value")
    controls = [_control(n, v) for n, v in zip(names, values, strict=True)]
    if live:
        from IPython.display import display

        def show(**chosen):
            display(draw(*(values[k][controls[k].options.index(chosen[n])] for k, n in enumerate(names))))

        return widgets.interactive(show, **dict(zip(names, controls, strict=True)))

    def image(*args) -> widgets.HTML:
        shown = ", ".join(f"{n} = {a}" for n, a in zip(names, args, strict=True))
        return png_widget(figure_to_png(draw(*args)), f"{alt} Shown: {shown}." if alt else "")

    if len(names) == 1:
        view = widgets.Stack([image(v) for v in values[0]], selected_index=0)
    else:
        inner = [widgets.Stack([image(a, b) for b in values[1]], selected_index=0) for a in values[0]]
        for stack in inner:
            widgets.jslink((controls[1], "index"), (stack, "selected_index"))
        view = widgets.Stack(inner, selected_index=0)
    # "index" is the synced trait of a selection control ("value" exists only in Python)
    widgets.jslink((controls[0], "index"), (view, "selected_index"))
    return widgets.VBox([*controls, view])

