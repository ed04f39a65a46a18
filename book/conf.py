"""Sphinx configuration of the website: the executed notebooks as pages, built offline.

Build it with ``make site`` (``sphinx-build -b html -c book . build/site``): the source folder
is the repository's root, so each page sits at its notebook's path (``notebooks/01_….html``)
and the "Open in Colab" link is the notebook's own path in the repository. Only the notebooks
of :data:`mhsa_helpers.lessons.LESSONS` and this folder's pages are read, in the registry's
order; the notebooks are shown as committed (executed), never run again.

Nothing on a page is fetched from another site: MathJax 3 is copied from the
``django-static-mathjax`` package into ``_static/mathjax``, the notebooks' remote Colab badge
image becomes a local icon, and any other remote image fails the build.
"""

from __future__ import annotations

import html
import importlib.util
import json
import shutil
from pathlib import Path, PurePosixPath

from docutils import nodes
from sphinx.transforms import SphinxTransform
from sphinx.util import logging

from mhsa_helpers.lessons import LESSONS

# Where the notebooks are published, the branch the Colab links open and the notebooks' "Open in Colab"
# badge (a remote image, drawn here by ``_static/site.css`` instead): one place, mhsa_helpers.lessons.links.
from mhsa_helpers.lessons.links import BRANCH as REPOSITORY_BRANCH
from mhsa_helpers.lessons.links import COLAB_BADGE, COLAB_URL, REPOSITORY_URL, colab_link
from mhsa_helpers.teaching.site_explorers import budget_table, site_explorers

ROOT = Path(__file__).resolve().parent.parent
#: The explorers' precomputed pictures, kept between builds of the same code (see site_explorers).
EXPLORER_CACHE = ROOT / "build" / "site-explorers"
logger = logging.getLogger(__name__)

MATHJAX = Path(importlib.util.find_spec("mathjax").origin).parent / "static" / "mathjax" / "es5"

project = "Attention, step by step"
author = "the Attention, step by step authors"
copyright = "the Attention, step by step authors"  # no year: the build is the same on any day

extensions = ["myst_nb"]
root_doc = "book/index"
# The source folder is the repository: read this folder's pages and the registry's notebooks only.
include_patterns = ["book/*.md"]
for _lesson in LESSONS:
    include_patterns += [str(path) for path in (_lesson.notebook, _lesson.solutions) if path is not None]
exclude_patterns = [".*", "build", "dist", "**/__pycache__", "**/.ipynb_checkpoints", "book/_templates"]
templates_path = ["_templates"]
html_static_path = ["_static"]

# The notebooks are committed executed (and nbval-checked): show them as they are.
nb_execution_mode = "off"
# An explorer's widget view needs a kernel; its static picture (image/png, text/html) is shown instead.
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
# No ipywidgets JavaScript (it would come from a CDN).
nb_ipywidgets_js = {}
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
# The solutions notebooks jump from the title (H1) to each exercise (H3), as in Jupyter: by design.
suppress_warnings = ["myst.header"]

# MathJax 3 from the pip package django-static-mathjax (MathJax's own files, no dependencies), served from
# this site. Its SVG output draws the glyphs itself: no font is fetched.
mathjax_path = "mathjax/tex-svg.js"

html_theme = "sphinx_book_theme"
html_title = project
# Without one, browsers ask for /favicon.ico (a 404).
html_favicon = "_static/favicon.svg"
html_copy_source = False
html_last_updated_fmt = None
html_additional_pages = {"index": "redirect.html"}
# An empty default mode is logged as a console error by the theme.
html_context = {"redirect_to": "book/index.html", "default_mode": "auto"}
html_theme_options = {
    "repository_url": REPOSITORY_URL,
    "repository_branch": REPOSITORY_BRANCH,
    "path_to_docs": "",
    "use_repository_button": True,
    "launch_buttons": {"colab_url": COLAB_URL},
    "home_page_in_toc": True,
    "show_toc_level": 2,
}


def doc_link(title: str, notebook: PurePosixPath) -> str:
    return f"{{doc}}`{title} </{notebook.with_suffix('')}>`"


def series_table() -> str:
    """The front page's table of the lessons, and the navigation (lessons, then solutions) in the registry's order."""
    rows = ["| # | notebook | the idea | solutions |", "|---|---|---|---|"]
    for item in LESSONS:
        solutions = doc_link("solutions", item.solutions) if item.solutions is not None else ""
        rows.append(f"| {item.number:02d} | {doc_link(item.title, item.notebook)} | {item.summary} | {solutions} |")
    lessons = [f"{item.number:02d} · {item.title} </{item.notebook.with_suffix('')}>" for item in LESSONS]
    solutions = [
        f"{item.number:02d} · Solutions </{item.solutions.with_suffix('')}>" for item in LESSONS if item.solutions
    ]
    blocks = ["\n".join(rows)]
    for caption, entries in (("The series", lessons), ("Solutions", solutions)):
        blocks.append(f"```{{toctree}}\n:caption: {caption}\n:hidden:\n\n" + "\n".join(entries) + "\n```")
    return "\n\n" + "\n\n".join(blocks) + "\n"


def add_series_table(app, docname: str, source: list[str]) -> None:
    if docname == root_doc:
        source[0] += series_table()


class LocaliseRemoteImages(SphinxTransform):
    """The Colab badge becomes a label drawn by ``site.css``; any other remote image is an error."""

    default_priority = 100

    def apply(self, **kwargs: object) -> None:
        for image in list(self.document.findall(nodes.image)):
            uri = image.get("uri", "")
            if uri == COLAB_BADGE:
                image.replace_self(nodes.inline("", "Open in Colab", classes=["colab-badge"]))
            elif "://" in uri or uri.startswith("//"):
                raise ValueError(f"{self.env.docname}: remote image {uri!r} would be fetched by every reader's browser")


def make_explorers(app) -> None:
    """Each explorer's settings and pictures (computed once per version of the code), copied into
    ``_static/explorers/<notebook>-<cell>/``; a page over its budget of pictures, a site over its budget of
    pictures or of time to compute them fails the build (``budget_table``); the table is logged."""
    app.site_explorers = {}
    if app.builder.format != "html":
        return
    app.site_explorers = site_explorers(LESSONS, ROOT, EXPLORER_CACHE)
    for key, made in app.site_explorers.items():
        target = Path(app.outdir) / "_static" / "explorers" / key
        shutil.copytree(made.folder / "pictures", target, dirs_exist_ok=True)
    for line in budget_table(app.site_explorers):
        logger.info(line)


class ExplorersWithoutKernel(SphinxTransform):
    """After each explorer cell's picture, the explorer's controls as the website can move them (hidden until
    ``explorers.js`` shows them in place of the picture): the manifest of its precomputed settings, inline."""

    default_priority = 200

    def apply(self, **kwargs: object) -> None:
        explorers = getattr(self.app, "site_explorers", {})
        page = PurePosixPath(self.env.docname)
        up = "../" * (len(page.parts) - 1)
        for cell in list(self.document.findall(nodes.container)):
            if cell.get("nb_element") != "cell_code":
                continue
            key = f"{page.name}-{cell.get('cell_index')}"
            if key not in explorers:
                continue
            manifest = explorers[key].manifest | {
                "pictures": f"{up}_static/explorers/{key}/",
                "colab": colab_link(f"{page}.ipynb"),
            }
            # "</" cannot end the script early: JSON allows "<\/" for "</".
            text = json.dumps(manifest).replace("</", "<\\/")
            label = html.escape(manifest["title"])
            cell += nodes.raw(
                "",
                f'<div class="mhsa-site-explorer" data-key="{key}" hidden aria-label="{label}">'
                f'<script type="application/json">{text}</script></div>',
                format="html",
            )


def copy_mathjax(app) -> None:
    # Before the pages are written, so that every build links the same files.
    if app.builder.format == "html":
        shutil.copytree(MATHJAX, Path(app.outdir) / "_static" / "mathjax", dirs_exist_ok=True)


def setup(app) -> None:
    app.connect("source-read", add_series_table)
    app.add_transform(LocaliseRemoteImages)
    app.connect("builder-inited", copy_mathjax)
    app.connect("builder-inited", make_explorers)
    app.add_transform(ExplorersWithoutKernel)
    app.add_js_file("explorers.js")
    app.add_css_file("site.css")
