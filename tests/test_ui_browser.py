"""The MLflow UI as a user meets it: `harness ui` over a store holding a smoke sweep, driven by a
real headless Chromium (Debian's chromium + chromedriver, through Selenium).

Needs `make install-system` (which .ci/run calls). Outside CI the test skips, saying why, when the
browser is missing; under CI=true a missing browser is a failure, never a silent skip."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
import requests

from harness.sweeps import spec as sweepspec
from harness.sweeps.engine import run_sweep
from harness.store.tracking import Store
from conftest import mlflow_client

pytestmark = pytest.mark.slow
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
SCREENSHOTS = Path(os.environ.get("HARNESS_SCREENSHOT_DIR", Path(__file__).resolve().parent.parent / "reports"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def browser():
    missing = [n for n, p in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if not p]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium")
    if missing:
        message = f"{', '.join(missing)} not installed; run `make install-system`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--window-size=1500,1300"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    """A store with the shipped T6.1 sweep at smoke scale (two cells), served by `harness ui`."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('ui') / 'mlflow.db'}"
    store = Store(uri)
    result = run_sweep(sweepspec.load("sparsity"), store, scale="smoke",
                       overrides={"sparsity": [0.0, 0.5]}, show_progress=False)
    assert [r.outcome for r in result.results] == ["ok", "ok"]
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "harness", "ui", "--port", str(port), "--tracking-uri", uri],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            if requests.get(f"{base}/health", timeout=2).ok:
                break
        except requests.RequestException:
            time.sleep(1)
    else:
        server.kill()
        pytest.fail("harness ui did not answer /health within 180 s")
    experiment_id = mlflow_client(store).get_experiment_by_name("sparsity").experiment_id
    yield base, experiment_id, result
    os.killpg(server.pid, 15)
    server.wait(timeout=30)


def _wait_for_text(driver, *texts: str, timeout: float = 60) -> str:
    deadline = time.time() + timeout
    body = ""
    while time.time() < deadline:
        # innerText of the whole document: the compare view's tables sit below the fold.
        body = driver.execute_script("return document.body.innerText")
        if all(t in body for t in texts):
            return body
        time.sleep(0.5)
    raise AssertionError(f"page never showed {[t for t in texts if t not in body]}; it showed: {body[:600]}")


def test_experiment_lists_the_sweep_and_its_cells(browser, ui):
    from selenium.webdriver.common.by import By

    base, experiment_id, _ = ui
    browser.get(f"{base}/#/experiments/{experiment_id}/runs")
    _wait_for_text(browser, "sparsity (smoke)")
    # Cells are child runs, folded under the sweep's parent run: unfold it as a user would.
    expander = browser.find_element(
        By.XPATH, "//*[text()='sparsity (smoke)']/ancestor::div[contains(@class,'ag-cell')]"
                  "//button[contains(@data-component-id,'runnamecellrenderer')]")
    expander.click()
    _wait_for_text(browser, "sparsity=0.0", "sparsity=0.5")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / "mlflow-runs.png"))


def test_compare_view_shows_params_and_metrics_of_two_cells(browser, ui):
    base, experiment_id, result = ui
    runs = json.dumps([r.run_id for r in result.results])
    browser.get(f"{base}/#/compare-runs?runs={urllib.parse.quote(runs)}"
                f"&experiments={urllib.parse.quote(json.dumps([experiment_id]))}")
    body = _wait_for_text(browser, "sparsity=0.0", "sparsity=0.5", "train_time_s", "test_accuracy",
                          "param_count", "pruning_backend")
    assert "1059306" in body.replace(",", "") and "2122186" in body.replace(",", "")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.execute_script("""const el = [...document.querySelectorAll('h1,h2,h3,span,button')]
        .find(e => e.innerText && e.innerText.trim() === 'Run details'); if (el) el.scrollIntoView();""")
    browser.save_screenshot(str(SCREENSHOTS / "mlflow-compare.png"))
