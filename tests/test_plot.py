import ipywidgets as widgets
import matplotlib.pyplot as plt
from ipywidgets.widgets.widget import _instances
from ipywidgets.widgets.widget_link import Link

from lmbook.plot import slider_figure


def _draw(v):
    fig, ax = plt.subplots()
    ax.plot([0, v])
    return fig


def test_slider_figure_precomputes_one_image_per_value():
    box = slider_figure(_draw, [1, 2, 3], description="v")
    slider, stack = box.children
    assert isinstance(stack, widgets.Stack)
    assert len(stack.children) == 3
    assert all(isinstance(c, widgets.Image) and bytes(c.value).startswith(b"\x89PNG") for c in stack.children)
    assert len({bytes(c.value) for c in stack.children}) == 3, "different values should draw different images"


def test_slider_is_linked_in_the_browser_not_in_python():
    box = slider_figure(_draw, [1, 2])
    slider, stack = box.children
    links = [w for w in _instances.values() if isinstance(w, Link)
             and w.source == (slider, "index") and w.target == (stack, "selected_index")]
    assert links, "slider.index must be jslink'ed to stack.selected_index (works on a static page)"
