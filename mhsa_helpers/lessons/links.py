"""Where the series is published, in one place: the repository, the release the notebooks install
on Colab, the "Open in Colab" badge of every notebook, its set-up cell and its link to its solutions.

``python scripts/sync_notebooks.py`` writes the badge and the set-up cell into every
notebook from here, the website's configuration (``book/conf.py``) reads the same constants, and
``tests/test_notebook_links.py`` fails when a notebook has drifted.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from .. import __version__

__all__ = [
    "BRANCH",
    "COLAB_BADGE",
    "COLAB_URL",
    "REPOSITORY",
    "REPOSITORY_URL",
    "badge_markdown",
    "colab_link",
    "install_spec",
    "release_tag",
    "setup_cell",
    "solutions_markdown",
]

#: ``owner/name`` of the GitHub repository.
REPOSITORY = "attention-step-by-step/attention-step-by-step"
REPOSITORY_URL = f"https://github.com/{REPOSITORY}"
#: The branch the Colab links open (the notebooks as last committed).
BRANCH = "main"
COLAB_URL = "https://colab.research.google.com"
COLAB_BADGE = f"{COLAB_URL}/assets/colab-badge.svg"


def release_tag() -> str:
    """The git tag of this version of the package, ``v<version>``: what Colab installs."""
    return f"v{__version__}"


def install_spec(ref: str | None = None) -> str:
    """The pip requirement a Colab notebook installs: this package at ``ref``, by default its release tag."""
    return f"mhsa-helpers @ git+{REPOSITORY_URL}@{ref or release_tag()}"


def colab_link(notebook: str) -> str:
    """The Colab URL that opens ``notebook`` (a path from the repository root, e.g.
    ``notebooks/01_qkv_by_hand.ipynb``) from GitHub."""
    path = PurePosixPath(notebook)
    if path.is_absolute() or path.suffix != ".ipynb":
        raise ValueError(f"notebook must be a relative path to an .ipynb file, got {notebook!r}")
    return f"{COLAB_URL}/github/{REPOSITORY}/blob/{BRANCH}/{path}"


def badge_markdown(notebook: str) -> str:
    """The "Open in Colab" badge line of ``notebook``'s first cell."""
    return f"[![Open In Colab]({COLAB_BADGE})]({colab_link(notebook)})"


def solutions_markdown(notebook: str) -> str:
    """The link from a lesson notebook (a path from the repository root) to its solutions notebook: relative, for
    JupyterLab, GitHub and the website, and its Colab link, since Colab opens a notebook alone, without the
    files beside it."""
    path = PurePosixPath(notebook)
    relative = f"solutions/{path.stem}_solutions.ipynb"
    return f"[`{relative}`]({relative}) ([open it in Colab]({colab_link(str(path.parent / relative))}))"


def setup_cell() -> str:
    """The first code cell of every notebook: on Colab, install the package at its release tag (or, before
    that tag exists, from the default branch, saying so in one line) and say what it installs; a failed
    install stops the notebook with one line that says what went wrong."""
    return f'''# Set-up: on Google Colab, install the helper package at the release these notebooks were written for
# (from the {BRANCH} branch while that release is not tagged yet); elsewhere `make lab` already did.
import sys
if "google.colab" in sys.modules:
    import subprocess
    REPOSITORY, REF = "{REPOSITORY_URL}", "{release_tag()}"
    # `git ls-remote --exit-code` exits with 2 when the repository has no such tag (128 when it cannot ask)
    looked = subprocess.run(["git", "ls-remote", "--exit-code", "--tags", REPOSITORY, REF], capture_output=True)
    if looked.returncode == 2:
        print(f"{{REF}} is not tagged yet: installing the {BRANCH} branch instead")
        REF = "{BRANCH}"
    PACKAGE = f"mhsa-helpers @ git+{{REPOSITORY}}@{{REF}}"
    print("installing", PACKAGE)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", PACKAGE], capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message from pip"])[-1]
        raise SystemExit(f"could not install {{PACKAGE}} (pip exit {{done.returncode}}): {{last}}")'''
