"""A private JupyterLab server for the browser tests, and the Chromium settings they share.

``running_lab(root, base)`` starts ``jupyter lab`` on 127.0.0.1 (free port, random token,
private config/data/runtime/settings folders under ``base``, this Python's ipykernel as the
``python3`` kernel) serving ``root``; if another process takes the port first, it is started
again on a new one. On exit the kernels are shut down through the server, then the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

#: How every browser test launches Chromium: headless, and never reaching for the network itself.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SERVER_TIMEOUT = 90
#: Extra attempts to start the server when its port was taken between choosing and binding it.
PORT_RETRIES = 3
#: JupyterLab settings of the test server: every cell stays in the page (no windowing), so that
#: explorers far down a long notebook can be found and driven.
#: ``config.stash`` key of the latency rows ``(explorer, control, to-caption ms, to-picture ms)``
#: that the browser tests measure and conftest prints at the end of the report.
LATENCY_ROWS = pytest.StashKey[list]()
#: ``config.stash`` key of the website's latency rows ``(explorer, control, ms per move, bare input's ms per move)``.
SITE_LATENCY_ROWS = pytest.StashKey[list]()
#: What a website explorer's move may take beyond the bare range input's: one frame at 60 Hz.
FRAME_MS = 16
LAB_SETTINGS = {"@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lab_environment(base: Path) -> dict:
    """Private Jupyter folders under ``base``, with this Python as the ``python3`` kernel."""
    env = dict(os.environ)
    env.update(
        JUPYTER_CONFIG_DIR=str(base / "config"),
        JUPYTER_DATA_DIR=str(base / "data"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
        JUPYTER_PATH=str(base / "data"),
        JUPYTERLAB_SETTINGS_DIR=str(base / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(base / "workspaces"),
        PYTHONHASHSEED="0",
    )
    env.pop("PYTHONPATH", None)
    for name, settings in LAB_SETTINGS.items():
        path = base / "settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))
    # The kernel is this very Python (the analogue of nbval's --nbval-current-env):
    # a python3 kernelspec in the private data folder, which is searched first.
    subprocess.run(
        [sys.executable, "-m", "ipykernel", "install", "--user", "--name", "python3"],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return env


def lab_command(root: Path, port: int, token: str) -> list:
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        # Nothing that would reach out to the internet while the test runs.
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        # window.jupyterapp, to run "Run All Cells" without hunting menus.
        "--LabApp.expose_app_in_browser=True",
    ]
    if os.geteuid() == 0:  # CI containers run as root; the server refuses that by default
        command.append("--allow-root")
    return command


def api(url: str, token: str, path: str, method: str = "GET", timeout: float = 10):
    request = urllib.request.Request(f"{url}{path}", method=method, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read()
        return json.loads(body) if body else None


def start_lab(root: Path, base: Path, env: dict, token: str, ports) -> tuple:
    """Start ``jupyter lab`` on the first of ``ports`` it can bind, trying at most
    ``1 + PORT_RETRIES`` of them: a port found free can be taken by another process before
    the server binds it. Returns ``(server, url, log_path, log file)`` once it answers."""
    failures = []
    for attempt, port in zip(range(1 + PORT_RETRIES), ports, strict=False):  # ports may be longer
        log_path = base / f"server-{attempt}.log"
        log = open(log_path, "w")  # noqa: SIM115 - stays open while the server runs; the caller closes it
        server = subprocess.Popen(
            lab_command(root, port, token),
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + SERVER_TIMEOUT
        while True:
            if server.poll() is not None:
                log.close()
                text = log_path.read_text()
                if "already in use" in text or f"port {port} is not available" in text:
                    failures.append(f"port {port} was taken")
                    break  # try the next port
                pytest.fail(f"jupyter lab exited with {server.returncode}:\n{text[-3000:]}")
            try:
                if api(url, token, "/api/status", timeout=2) is not None:
                    return server, url, log_path, log
            except OSError:
                pass
            if time.monotonic() > deadline:
                stop_lab(server, url, token)
                log.close()
                pytest.fail(f"jupyter lab did not answer within {SERVER_TIMEOUT} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
    pytest.fail(f"jupyter lab could not bind a port in {1 + PORT_RETRIES} attempts: {'; '.join(failures)}")


def stop_lab(server: subprocess.Popen, url: str, token: str) -> None:
    """Shut the kernels down through the server, then stop the server.

    Kernels are started in sessions of their own, so a signal to the server's process
    group does not reach them; a server that exits cleanly shuts them down itself, but
    one killed after a hang would leave them running. Hence the REST API first.
    """
    if server.poll() is None:
        try:
            for kernel in api(url, token, "/api/kernels", timeout=5) or []:
                api(url, token, f"/api/kernels/{kernel['id']}", method="DELETE", timeout=20)
        except (OSError, ValueError) as error:  # an unresponsive server: terminate it anyway
            print(f"could not shut the kernels down through the server: {error}", file=sys.stderr)
    try:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)


def free_ports():
    while True:
        yield free_port()


@contextlib.contextmanager
def running_lab(root: Path, base: Path, token: str) -> Iterator[tuple[str, Path]]:
    """A JupyterLab server of this Python serving ``root``; yields ``(url, server log path)``."""
    env = lab_environment(base)
    server, url, log_path, log = start_lab(root, base, env, token, free_ports())
    try:
        yield url, log_path
    finally:
        stop_lab(server, url, token)
        log.close()


def latency_table(rows: list) -> list[str]:
    """Markdown lines: per explorer, median keypress-to-caption and keypress-to-picture, and
    their ratio to the bare slider's keypress-to-caption."""
    bare = next((statistics.median(c) for name, _, c, _ in rows if name == "bare IntSlider"), None)
    lines = [
        "| explorer | control | moves | median to caption ms | median to picture ms | picture / bare slider |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for name, control, caption, picture in rows:
        to_caption = statistics.median(caption)
        to_picture = statistics.median(picture) if picture else None
        ratio = (to_picture or to_caption) / bare if bare else float("nan")
        shown = f"{to_picture:.0f}" if to_picture is not None else "-"
        lines.append(f"| {name} | {control} | {len(caption)} | {to_caption:.0f} | {shown} | {ratio:.1f}× |")
    return lines


def site_latency_table(rows: list) -> list[str]:
    """Markdown lines: per website explorer, the median and largest keypress-to-frame time of its first slider, the
    bare range input's median on the same page, and whether the explorer's median is within FRAME_MS of it."""
    lines = [
        "| explorer | control | moves | median ms | largest ms | bare input ms | median - bare | within a frame |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, control, frames, bare in rows:
        median, reference = statistics.median(frames), statistics.median(bare)
        within = "yes" if median - reference <= FRAME_MS else "no"
        lines.append(
            f"| {name} | {control} | {len(frames)} | {median:.1f} | {max(frames):.1f} | {reference:.1f} "
            f"| {median - reference:+.1f} | {within} |"
        )
    return lines
