"""Small fixes to the built pages, as a local Sphinx extension (see _config.yml, local_extensions).

sphinx-thebe registers its inline configuration script once per read phase, and Jupyter Book
ends up with two, which redeclares a `const` and logs a console error on every page: each page's
scripts are de-duplicated here.

The tables of contents find the exercises and solutions by folder, and a page is titled by its first
heading: a solution notebook (generated from the same source as its exercise) says "Exercise N", which
becomes "Solution N" in the instructor's edition.

The book's own style sheet (static/lmbook.css) sizes code so that a line of the pages' longest fits the column.

myst-nb writes each page's executed notebook to _build/jupyter_execute/ (the theme offers it as the page's
download), but a page taken from the execution cache is written without its outputs: the cached outputs are
merged back into it here.
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes

STATIC = Path(__file__).resolve().parent / "static"


def _dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    seen, unique = set(), []
    for js in context.get("script_files", []):
        attributes = getattr(js, "attributes", {}) or {}
        # an inline script's filename is None in one registration and "" in the other
        key = (getattr(js, "filename", str(js)) or "", tuple(sorted((k, str(v)) for k, v in attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    context["script_files"] = unique


def _title_solutions(app, doctree) -> None:
    if not app.env.docname.startswith("solutions/"):
        return
    title = next(iter(doctree.findall(nodes.title)), None)
    if title is not None and title.astext().startswith("Exercise "):
        text = title.children[0]
        if isinstance(text, nodes.Text):
            title.replace(text, nodes.Text("Solution " + str(text)[len("Exercise "):]))


def _cached_outputs(app, doctree) -> None:
    config = app.env.mystnb_config  # myst-nb's settings, with its folders resolved
    if config.execution_mode != "cache":
        return
    path = Path(config.output_folder) / f"{app.env.docname}.ipynb"
    if not path.exists():
        return
    import nbformat
    from jupyter_cache import get_cache

    nb = nbformat.read(path, as_version=4)
    if any(cell.get("outputs") for cell in nb.cells):
        return  # executed in this build: written with its outputs
    try:
        _, merged = get_cache(config.execution_cache_path).merge_match_into_notebook(nb)
    except KeyError:  # not in the cache (its execution failed): nothing to merge
        return
    nbformat.write(merged, path)


def _add_static(app, config) -> None:
    config.html_static_path.append(str(STATIC))


def setup(app):
    app.connect("config-inited", _add_static)
    app.add_css_file("lmbook.css")
    app.connect("html-page-context", _dedupe_scripts)
    app.connect("doctree-read", _cached_outputs)
    # before Sphinx records the page's title for the table of contents (its collector runs at 500)
    app.connect("doctree-read", _title_solutions, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
