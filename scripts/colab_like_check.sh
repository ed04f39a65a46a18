#!/usr/bin/env bash
# Colab-like check: the built wheel, in a fresh venv with Colab's ipywidgets 7.7.1.
#
#   scripts/colab_like_check.sh            (PYTHON=python3.12 scripts/colab_like_check.sh to pick the Python)
#
# 1. creates a fresh venv in a temporary folder;
# 2. builds a wheel of the package with that venv's Python, from a copy of the sources
#    (the repo is not touched);
# 3. installs into the venv, in this order: torch==2.13.0 (first and on its own, so that
#    nothing pulls another torch build), ipywidgets==7.7.1 (what Colab ships), the wheel,
#    nbclient and ipykernel;
# 4. from a temporary working directory (so the source tree cannot be imported), executes
#    in a fresh kernel of that venv, with matplotlib's default backend in a kernel (the
#    inline one, as on Colab: no MPLBACKEND is set):
#    - a generated smoke notebook that imports the wheel, checks it is the installed copy,
#      displays every explorer and moves its controls;
#    - every notebook in notebooks/ and notebooks/solutions/ (if any), each with a last cell
#      appended that prints the ipywidgets version the kernel really imported.
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
echo "+ pip install torch==2.13.0"
"$venv_py" -m pip install --quiet "torch==2.13.0"
echo "+ pip install ipywidgets==7.7.1"
"$venv_py" -m pip install --quiet "ipywidgets==7.7.1"
echo "+ pip install <wheel> nbclient ipykernel (ipywidgets kept at 7.7.1)"
"$venv_py" -m pip install --quiet "$wheel" "ipywidgets==7.7.1" nbclient nbformat ipykernel

# A kernelspec of this venv's Python, found before any other "python3" kernel.
export JUPYTER_DATA_DIR="$work/jupyter-data"
export JUPYTER_CONFIG_DIR="$work/jupyter-config"
export JUPYTER_PATH="$work/jupyter-data"
export PYTHONHASHSEED=0 SOURCE_DATE_EPOCH=0
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
import glob
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
    "from mhsa_helpers import explorers, plots\n"
    "assert ipywidgets.__version__ == '7.7.1', ipywidgets.__version__\n"
    f"assert mhsa_helpers.__file__.startswith({venv_prefix!r}), mhsa_helpers.__file__\n"
    "print('torch', torch.__version__, '| ipywidgets', ipywidgets.__version__)",
    # Every explorer, displayed, then every control moved (as a slider would).
    "from IPython.display import display\n"
    "registered = len(ipywidgets.Widget.widgets)  # ipywidgets 7's registry of open widgets\n"
    "made = []\n"
    "for make in [explorers.qkv_explorer, explorers.scaling_explorer, explorers.masking_explorer,\n"
    "             explorers.heads_explorer, explorers.rope_explorer, explorers.mhsa_explorer]:\n"
    "    e = make()\n"
    "    display(e)\n"
    "    made.append(e)\n"
    "    for name, control in e.controls.items():\n"
    "        if control.disabled:\n"
    "            continue\n"
    "        before = e.redraw_count\n"
    "        if isinstance(control, ipywidgets.Checkbox):\n"
    "            control.value = not control.value\n"
    "        elif hasattr(control, 'options'):\n"
    "            values = [o[1] if isinstance(o, tuple) else o for o in control.options]\n"
    "            control.value = values[-1] if control.value != values[-1] else values[0]\n"
    "        else:\n"
    "            control.value = control.max if control.value != control.max else control.min\n"
    "        assert e.redraw_count == before + 1, (make.__name__, name)\n"
    "    print(make.__name__, 'ok:', e.data['caption'])",
    "h = explorers.heads_explorer()\n"
    "h.controls['num_heads'].value = 4\n"
    "assert h.data['weights'].shape == (4, 6, 6) and h.data['caption'].startswith('4 heads, seq 6')\n"
    "import matplotlib.pyplot as plt\n"
    "assert plt.get_fignums() == [], plt.get_fignums()\n"
    "plots.attention_heatmap(h.data['weights'][0], query_tokens=h.data['tokens'], key_tokens=h.data['tokens'])\n"
    "plt.show()",
    "try:\n"
    "    explorers.heads_explorer(num_heads=5)\n"
    "except ValueError as error:\n"
    "    assert 'num_heads' in str(error)\n"
    "else:\n"
    "    raise AssertionError('num_heads=5 was accepted')",
    # close() frees every widget the explorers made (their Layout and Style widgets too).
    "for e in made + [h]:\n"
    "    e.close()\n"
    "assert len(ipywidgets.Widget.widgets) == registered, (len(ipywidgets.Widget.widgets), registered)\n"
    "assert all(len(e._layouts) == 0 for e in made)",
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
except Exception as error:  # noqa: BLE001 - report and carry on with the notebooks
    failures += 1
    print(f"FAIL <smoke>: {type(error).__name__}: {error}", flush=True)

notebooks = sorted(
    p for p in glob.glob(os.path.join(run_dir, "notebooks", "**", "*.ipynb"), recursive=True)
    if ".ipynb_checkpoints" not in p
)
if not notebooks:
    print("no notebooks/ yet: only the smoke notebook was run")
for path in notebooks:
    rel = os.path.relpath(path, run_dir)
    try:
        run(nbformat.read(path, as_version=4), rel, os.path.dirname(path))
    except Exception as error:  # noqa: BLE001
        failures += 1
        print(f"FAIL {rel}: {type(error).__name__}: {str(error)[-2000:]}", flush=True)

import ipywidgets  # noqa: E402

print(f"ipywidgets used: {ipywidgets.__version__}; notebooks run: {len(notebooks)}; failures: {failures}")
sys.exit(1 if failures else 0)
PY
