"""The step viewer (chapter 22) in JupyterLab itself: a notebook that shows one is executed, signed
(trusted, as a notebook a reader ran is: JupyterLab runs an output's scripts only then), opened in
a JupyterLab server in headless Chromium, and stepped through with its buttons and arrow keys.

Needs chromium (installed by .ci/run); skipped without it unless DOCS_BROWSER_REQUIRED=1."""
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.sign import NotebookNotary

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
from browser_check import Checker, Chrome, find_browser  # noqa: E402

VIEWER_CELL = """\
from minivllm.config import CacheConfig, SchedulerConfig
from minivllm.core.sched.scheduler import Scheduler
from minivllm.request import Request
from minivllm.sampling_params import SamplingParams
from minivllm.testing.timeline import run_with_recorder
from minivllm.timeline import TimelineRecorder
from minivllm.viz.timeline import step_viewer
scheduler = Scheduler(SchedulerConfig(16, 8, 48), CacheConfig(4, 13))
arrivals = {0: [Request(f"R{i}", list(range(100 * i, 100 * i + 10)),
                       SamplingParams(max_tokens=12, ignore_eos=True)) for i in range(4)]}
step_viewer(run_with_recorder(scheduler, recorder=TimelineRecorder(snapshot_pool=True),
                              arrivals=arrivals), "in JupyterLab")"""

# the same stepping as docs/browser_check.py's check_step_viewers, inside JupyterLab's page
STEP_JS = """(() => { const root = document.querySelector('.jp-OutputArea .mv-step-viewer');
  if (!root) return null;
  const pool = () => Array.from(root.querySelectorAll('.mv-sv-block'))
    .map(b => (b.dataset.state || '?')[0]).join('');
  const seen = [root.dataset.step + ':' + pool()];
  root.querySelector('.mv-sv-next').click(); seen.push(root.dataset.step + ':' + pool());
  root.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight'}));
  seen.push(root.dataset.step + ':' + pool());
  return {n: +root.dataset.numSteps, steps: seen.map(x => x.split(':')[0]),
          pools: seen.map(x => x.split(':')[1])}; })()"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(probe, timeout: float, what: str):
    "Call `probe` until it returns something truthy; fail after `timeout` seconds."
    end = time.time() + timeout
    while time.time() < end:
        found = probe()
        if found: return found
        time.sleep(0.5)
    pytest.fail(f"{what} within {timeout:.0f} s")


@pytest.fixture
def signed_viewer_notebook(tmp_path):
    "An executed, signed notebook whose output is a step viewer; (folder, name, environment)."
    env = dict(os.environ, JUPYTER_DATA_DIR=str(tmp_path / "data"),
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(VIEWER_CELL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    assert any("mv-step-viewer" in o.get("data", {}).get("text/html", "")
               for o in nb.cells[0].outputs)
    Path(env["JUPYTER_DATA_DIR"]).mkdir()
    notary = NotebookNotary(data_dir=env["JUPYTER_DATA_DIR"])   # the server's own signatures
    notary.sign(nb)
    folder = tmp_path / "nbs"
    folder.mkdir()
    nbformat.write(nb, folder / "viewer.ipynb")
    return folder, "viewer.ipynb", env


def test_step_viewer_steps_in_jupyterlab(signed_viewer_notebook, tmp_path):
    browser = find_browser()
    if browser is None:
        if os.environ.get("DOCS_BROWSER_REQUIRED") == "1": pytest.fail("no chromium")
        pytest.skip("no chromium")
    folder, name, env = signed_viewer_notebook
    port, token = free_port(), secrets.token_hex(16)
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
         f"--ServerApp.token={token}", f"--ServerApp.root_dir={folder}",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "lab.log", "wb"))
    profile = tmp_path / "chromium"
    profile.mkdir()
    chrome = None
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_for(lambda: server.poll() is not None or "is running at" in
                 (tmp_path / "lab.log").read_text(errors="replace"), 120, "JupyterLab started")
        assert server.poll() is None, (tmp_path / "lab.log").read_text()[-2000:]
        chrome = Chrome(browser, str(profile))
        page = Checker(chrome, url)
        page.load(f"{url}lab/tree/{name}?token={token}")
        viewer = wait_for(lambda: page.evaluate(STEP_JS), 180, "the step viewer rendered")
    finally:
        if chrome: chrome.close()
        server.terminate()          # it shuts the notebook's kernel down first: give it a moment
        try: server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    assert viewer["n"] > 3 and viewer["steps"] == ["0", "1", "2"], viewer
    assert len(set(viewer["pools"])) > 1, viewer         # the pool it shows changes
