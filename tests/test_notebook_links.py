"""The badge and the Colab set-up cell of every notebook come from mhsa_helpers.lessons.links."""

import subprocess
import sys
import types
from pathlib import Path

import pytest

import mhsa_helpers
from mhsa_helpers.lessons import links

ROOT = Path(__file__).resolve().parent.parent


def test_every_notebook_has_the_badge_and_set_up_cell_of_links():
    done = subprocess.run(
        [sys.executable, "scripts/sync_notebooks.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, f"run `python scripts/sync_notebooks.py`:\n{done.stdout}{done.stderr}"


def test_colab_installs_this_version_from_its_tag():
    assert links.release_tag() == f"v{mhsa_helpers.__version__}"
    assert links.install_spec().endswith(f"@v{mhsa_helpers.__version__}")
    assert links.install_spec().startswith(f"mhsa-helpers @ git+{links.REPOSITORY_URL}")


def test_colab_link_opens_the_notebook_from_github():
    url = links.colab_link("notebooks/01_qkv_by_hand.ipynb")
    assert url == f"{links.COLAB_URL}/github/{links.REPOSITORY}/blob/{links.BRANCH}/notebooks/01_qkv_by_hand.ipynb"
    for bad in ("/notebooks/x.ipynb", "notebooks/x.py"):
        with pytest.raises(ValueError, match="notebook"):
            links.colab_link(bad)


def run_setup_cell(monkeypatch, on_colab: bool, returncode: int = 0, stderr: str = "", tag_lookup: int = 0):
    """Run the set-up cell with `subprocess.run` faked: `git ls-remote` exits with `tag_lookup` (0: the tag
    exists, 2: no such tag, 128: git could not ask), pip with `returncode` and `stderr`."""
    calls = []

    def fake_run(command, **kwargs):
        calls.append(command)
        if command[:2] == ["git", "ls-remote"]:
            return subprocess.CompletedProcess(command, tag_lookup, stdout=b"", stderr=b"")
        return subprocess.CompletedProcess(command, returncode, stdout="", stderr=stderr)

    monkeypatch.setattr(subprocess, "run", fake_run)
    if on_colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(compile(links.setup_cell(), "<set-up cell>", "exec"), {})
    return calls


LOOK_FOR_THE_TAG = ["git", "ls-remote", "--exit-code", "--tags", links.REPOSITORY_URL, links.release_tag()]


def pip_install(spec: str) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "--quiet", spec]


def test_set_up_cell_does_nothing_outside_colab(monkeypatch):
    assert run_setup_cell(monkeypatch, on_colab=False) == []


@pytest.mark.parametrize("tag_lookup", [0, 128], ids=["tagged", "git cannot ask"])
def test_set_up_cell_installs_the_release_on_colab_and_says_so(monkeypatch, capsys, tag_lookup):
    calls = run_setup_cell(monkeypatch, on_colab=True, tag_lookup=tag_lookup)
    assert calls == [LOOK_FOR_THE_TAG, pip_install(links.install_spec())]
    assert capsys.readouterr().out == f"installing {links.install_spec()}\n"


def test_set_up_cell_installs_the_branch_in_one_more_line_while_the_release_is_not_tagged(monkeypatch, capsys):
    calls = run_setup_cell(monkeypatch, on_colab=True, tag_lookup=2)
    assert links.install_spec(links.BRANCH) == f"mhsa-helpers @ git+{links.REPOSITORY_URL}@{links.BRANCH}"
    assert calls == [LOOK_FOR_THE_TAG, pip_install(links.install_spec(links.BRANCH))]
    assert capsys.readouterr().out == (
        f"{links.release_tag()} is not tagged yet: installing the {links.BRANCH} branch instead\n"
        f"installing {links.install_spec(links.BRANCH)}\n"
    )


def test_a_failed_install_stops_with_one_line_that_says_why(monkeypatch):
    with pytest.raises(SystemExit) as stopped:
        run_setup_cell(monkeypatch, on_colab=True, returncode=1, stderr="Collecting x\nERROR: No matching distribution")
    message = str(stopped.value)
    assert "could not install" in message and "pip exit 1" in message and "No matching distribution" in message
    assert "\n" not in message


def test_a_lesson_links_its_solutions_beside_it_and_on_colab_where_the_notebook_is_alone():
    link = links.solutions_markdown("notebooks/04_multi_head_attention.ipynb")
    relative = "solutions/04_multi_head_attention_solutions.ipynb"
    assert link == (
        f"[`{relative}`]({relative}) ([open it in Colab]({links.COLAB_URL}/github/{links.REPOSITORY}/blob/"
        f"{links.BRANCH}/notebooks/{relative}))"
    )
