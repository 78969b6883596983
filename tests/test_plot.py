import base64
import html
import re

import ipywidgets as widgets
import matplotlib.pyplot as plt
import pytest
from ipywidgets.widgets.widget import _instances
from ipywidgets.widgets.widget_link import Link

from lmbook.plot import interactive_figure


def _draw(*args):
    fig, ax = plt.subplots()
    ax.plot([0, *[hash(a) % 7 for a in args]])
    ax.set_title(repr(args))
    return fig


def _png(img) -> bytes:
    """The PNG an image widget shows (an <img> with a data: URL)."""
    return base64.b64decode(re.search(r"base64,([A-Za-z0-9+/=]+)", img.value).group(1))


def _alt(img) -> str:
    return html.unescape(re.fullmatch(r"<img .*\balt='([^']*)'.*>", img.value).group(1))


def _linked(source, target) -> bool:
    return any(isinstance(w, Link) and w.source == source and w.target == target for w in list(_instances.values()))


def test_one_parameter_precomputes_one_image_per_value():
    box = interactive_figure(_draw, {"v": [1, 2, 3]})
    slider, stack = box.children
    assert isinstance(slider, widgets.SelectionSlider) and isinstance(stack, widgets.Stack)
    assert all(_png(c).startswith(b"\x89PNG") for c in stack.children)
    assert len({_png(c) for c in stack.children}) == 3, "different values should draw different images"


def test_slider_is_linked_in_the_browser_not_in_python():
    slider, stack = interactive_figure(_draw, {"v": [1, 2]}).children
    assert _linked((slider, "index"), (stack, "selected_index")), "jslink makes the figure work on a static page"


def test_two_parameters_nest_stacks_and_link_both_controls():
    box = interactive_figure(_draw, {"a": [1, 2, 3], "mode": ["x", "y"]})
    ctl_a, ctl_mode, outer = box.children
    assert isinstance(ctl_mode, widgets.Dropdown), "non-numeric values get a dropdown"
    assert len(outer.children) == 3 and all(len(inner.children) == 2 for inner in outer.children)
    assert _linked((ctl_a, "index"), (outer, "selected_index"))
    assert all(_linked((ctl_mode, "index"), (inner, "selected_index")) for inner in outer.children)
    images = {_png(img) for inner in outer.children for img in inner.children}
    assert len(images) == 6, "each combination is its own image"


def test_image_at_each_position_is_drawn_with_those_values():
    seen = []

    def draw(a, b):
        seen.append((a, b))
        return _draw(a, b)

    interactive_figure(draw, {"a": [1, 2], "b": [10, 20, 30]})
    assert seen == [(a, b) for a in (1, 2) for b in (10, 20, 30)]


def test_live_mode_redraws_through_interactive():
    calls = []

    def draw(a):
        calls.append(a)
        return _draw(a)

    w = interactive_figure(draw, {"a": [5, 6]}, live=True)
    assert isinstance(w, widgets.interactive)
    w.children[0].index = 1
    assert calls[-1] == 6
    plt.close("all")


@pytest.mark.parametrize("params", [{}, {"a": [1], "b": [2], "c": [3]}, {"a": []}])
def test_bad_parameters_are_rejected(params):
    with pytest.raises(ValueError):
        interactive_figure(_draw, params)


def test_each_image_carries_the_alt_text_and_the_values_it_is_drawn_for():
    box = interactive_figure(_draw, {"a": [1, 2], "mode": ["x", "y"]}, alt="Loss against steps.")
    alts = [_alt(img) for inner in box.children[-1].children for img in inner.children]
    assert alts == [f"Loss against steps. Shown: a = {a}, mode = {m}." for a in (1, 2) for m in "xy"], alts


def test_alt_text_with_quotes_and_brackets_stays_one_attribute():
    img = interactive_figure(_draw, {"v": ["<'a'>"]}, alt='The "loss" <b>').children[-1].children[0]
    assert _alt(img) == """The "loss" <b> Shown: v = <'a'>.""", img.value[-200:]
