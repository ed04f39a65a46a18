"""Explorers are seen where no kernel runs them: GitHub, nbviewer, an HTML export, JupyterLab before
the first run. Each stored explorer output carries its picture next to the widget, and an HTML export
of every notebook shows an image for every explorer cell."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import nbformat
import pytest
from nbconvert import HTMLExporter
from PIL import Image

from mhsa_helpers.lessons import LESSONS
from mhsa_helpers.teaching.explorer import CSS_DPI, DPI, PIXEL_RATIO, STATIC_NOTE

ROOT = Path(__file__).resolve().parents[1]
WIDGET = "application/vnd.jupyter.widget-view+json"
WITH_EXPLORERS = [item for item in LESSONS if item.explorer is not None]


@pytest.mark.parametrize("item", WITH_EXPLORERS, ids=lambda i: i.slug)
def test_an_explorer_offers_its_picture_next_to_the_widget(item):
    explorer = item.explorer()
    try:
        data, metadata = explorer._repr_mimebundle_()
        assert WIDGET in data
        assert data["text/plain"].endswith(STATIC_NOTE)
        picture = Image.open(io.BytesIO(base64.b64decode(data["image/png"])))
        # The figure (rendered at DPI) plus the caption band, shown at its natural width: a figure
        # inch is CSS_DPI CSS pixels, so the picture has PIXEL_RATIO image pixels per CSS pixel.
        width, height = explorer.figure.get_size_inches()
        assert picture.width == round(width * DPI)
        assert metadata["image/png"]["width"] == round(width * CSS_DPI)
        assert picture.width == PIXEL_RATIO * metadata["image/png"]["width"]
        assert picture.height > height * DPI
    finally:
        explorer.close()


def widget_outputs(path: Path) -> list[dict]:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    return [
        output
        for cell in notebook["cells"]
        if cell["cell_type"] == "code"
        for output in cell.get("outputs", [])
        if WIDGET in output.get("data", {})
    ]


@pytest.mark.parametrize("item", LESSONS, ids=lambda i: i.slug)
def test_every_stored_explorer_output_has_a_picture_and_html_shows_it(item):
    path = ROOT / item.notebook
    outputs = widget_outputs(path)
    if item.explorer is not None:
        assert outputs, f"{item.notebook} shows no explorer output: re-execute it (make notebooks)"
    for output in outputs:
        if "image/png" not in output["data"]:
            # Only other widgets (notebook 07's progress bar) may lack a picture, never an explorer.
            assert "Explorer(" not in output["data"]["text/plain"], f"{item.notebook}: an explorer without its picture"
    body, _ = HTMLExporter().from_notebook_node(nbformat.read(path, as_version=4))
    # Each explorer's picture reaches the page as an inline PNG (progress bars and other widgets
    # without a picture do not count).
    pictures = [output["data"]["image/png"][:200] for output in outputs if "image/png" in output["data"]]
    for picture in pictures:
        assert picture in body.replace("\n", "")
