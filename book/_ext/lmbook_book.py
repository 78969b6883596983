"""Small fixes to the built pages, as a local Sphinx extension (see _config.yml, local_extensions).

sphinx-thebe registers its inline configuration script once per read phase, and Jupyter Book
ends up with two, which redeclares a `const` and logs a console error on every page: each page's
scripts are de-duplicated here.
"""

from __future__ import annotations


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


def setup(app):
    app.connect("html-page-context", _dedupe_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
