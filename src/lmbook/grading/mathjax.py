"""Feedback pages that typeset their maths with no network: MathJax served from the feedback folder.

nbgrader's feedback template loads MathJax 2 from a CDN; offline (an exam room, a laptop on a train) the
task statements' maths stays raw TeX. The course's own MathJax 3 (the npm copy the book serves, in SVG
output, so one file with no fonts) is copied into ``feedback/_mathjax/`` once per assignment, and each page
loads it from there, with the CDN only as a fallback when the page is opened away from that folder (a page
sent on its own to a student who is online).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FILE = "tex-svg-full.js"  # TeX input with every extension, SVG output: self-contained
FOLDER = "_mathjax"
VERSION = "3.2.2"  # package.json's pin: the fallback loads the same release
CDN = f"https://cdn.jsdelivr.net/npm/mathjax@{VERSION}/es5/{FILE}"
_CDN_SCRIPT = re.compile(r"<script[^>]*\bsrc=[\"']https?://[^\"']*mathjax[^\"']*[\"'][^>]*>\s*</script>\s*", re.I)
_V2_CONFIG = re.compile(r"<script type=[\"']text/x-mathjax-config[\"']>.*?</script>\s*", re.S | re.I)
_CONFIG = ("""<script>
window.MathJax = {
  tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']], displayMath: [['$$', '$$'], ['\\\\[', '\\\\]']],
        processEscapes: true, processEnvironments: true, tags: 'ams'},
  svg: {fontCache: 'global'},
  options: {enableMenu: false}
};
</script>
""" f'<script id="MathJax-script" src="{FOLDER}/{FILE}" onerror="var s = document.createElement(\'script\'); '
           f"s.src = '{CDN}'; document.head.appendChild(s);\"></script>\n")


def source() -> Path | None:
    """The course's MathJax file: from ``make install``'s vendor folder, or npm's."""
    for folder in (ROOT / ".vendor" / "static" / "vendor" / "mathjax", ROOT / "node_modules" / "mathjax" / "es5"):
        if (folder / FILE).is_file():
            return folder / FILE
    return None


def install(feedback: Path) -> bool:
    """Copy MathJax into ``feedback/_mathjax/``; False when the course has none (``make install`` not run)."""
    src = source()
    if src is None:
        return False
    (feedback / FOLDER).mkdir(parents=True, exist_ok=True)
    dest = feedback / FOLDER / FILE
    if not dest.exists() or dest.stat().st_size != src.stat().st_size:
        shutil.copyfile(src, dest)
    return True


def offline(page: str) -> str:
    """The feedback page with its CDN MathJax (and MathJax 2 configuration) replaced by the local MathJax 3."""
    page = _V2_CONFIG.sub("", _CDN_SCRIPT.sub("", page))
    at = page.find("</head>")
    return page[:at] + _CONFIG + page[at:] if at >= 0 else _CONFIG + page
