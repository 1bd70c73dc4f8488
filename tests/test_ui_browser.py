"""The MLflow UI as a user meets it: `harness sweep` into a fresh store, then `harness ui`, driven by
a real headless Chromium (Debian's chromium + chromedriver, through Selenium). Each test does what
the walkthrough in docs/MLFLOW_UI.md tells a user to do, and checks what the page shows: the
experiment's overview holds the table beside the published figures, the sweep unfolds to its
cells (each naming its data in the Dataset column), the chart view charts the cells' metrics (no
bookkeeping), and the compare view lists only the params the experiment reads.

Needs `make install-system` (which .ci/run calls). Outside CI the test skips, saying why, when the
browser is missing; under CI=true a missing browser is a failure, never a silent skip.

The screenshots in docs/MLFLOW_UI.md come from this file run against a store holding a real-data
T6.1 sweep:
    make sweep-sparsity SCALE=quick DATASET=imagefolder DATA_DIR=... TRACKING_URI=sqlite:////tmp/t61/mlflow.db
    HARNESS_UI_STORE=sqlite:////tmp/t61/mlflow.db HARNESS_SCREENSHOT_DIR=docs .venv/bin/pytest tests/test_ui_browser.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

import experiments
from conftest import free_port, skip_unless_ci
from harness import folders, ui_links
from harness.cli import main
from harness.store.tracking import PARENT, RunRecord, Store

pytestmark = pytest.mark.slow
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
# HARNESS_SCREENSHOT_DIR=docs for the pages' images; else the reports folder, which the suite points at a
# temporary one (tests/conftest.py), so a test run leaves no screenshot in the checkout.
SCREENSHOTS = Path(os.environ.get("HARNESS_SCREENSHOT_DIR") or folders.REPORTS_DIR)
SWEEP = "sparsity"
EXPAND_DESCRIPTION = "//button[@data-component-id='mlflow.experiment.metadata_editor.expand_button']"
FOLD_DESCRIPTION = "//button[@data-component-id='mlflow.experiment.metadata_editor.collapse_button']"
SCROLL_AFTER_S = 3  # a text the page has not shown by then is looked for in its scrolling boxes too


@dataclass
class UI:
    base: str                 # http://127.0.0.1:PORT
    experiment_id: str
    store: Store
    parent: RunRecord         # the sweep invocation whose cells the tests look at
    cells: list[RunRecord]    # its finished cells, in grid order
    printed_url: str = ""     # the sweep's address as `harness ui` printed it: the view of its newest cells


@pytest.fixture(scope="module")
def browser():
    driver = _start_browser()
    yield driver
    driver.quit()


def _start_browser(width: int = 1500, height: int = 1300):
    """A headless Chromium with a profile of its own (chromedriver makes a fresh one per session)."""
    missing = [n for n, p in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if not p]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium")
    if missing:
        skip_unless_ci(f"{', '.join(missing)} not installed; run `make install-system`")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", f"--window-size={width},{height}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    return driver


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    """The shipped T6.1 sweep at smoke scale (two cells) run by the `harness sweep` command, as a
    user would (so the experiment's description is what the command leaves), served by `harness ui`.
    HARNESS_UI_STORE points it at a store that already holds a sparsity sweep instead."""
    uri = os.environ.get("HARNESS_UI_STORE")
    if not uri:
        uri = f"sqlite:///{tmp_path_factory.mktemp('ui') / 'mlflow.db'}"
        for _ in range(2):  # the second invocation reuses every cell, as a user rerunning it would
            assert main(["sweep", SWEEP, "--scale", "smoke", "--set", "sparsity=[0.0,0.5]", "--tracking-uri", uri,
                         "--no-progress"]) == 0
    store = Store(uri)
    experiment_id = store.find_experiment(SWEEP)
    ok = [r for r in store.sweep_runs(experiment_id, SWEEP) if r.finished_ok]
    parent = next(r for r in store.sweep_runs(experiment_id, SWEEP, parents=True) if r.run_id == ok[0].tags[PARENT])
    cells = sorted((r for r in ok if r.tags[PARENT] == parent.run_id), key=lambda r: float(r.params["sparsity"]))
    assert len(cells) >= 2, "the UI tests need a sweep invocation with two finished cells"
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "harness", "ui", "--port", str(port), "--tracking-uri", uri],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    printed: list[str] = []  # `harness ui` prints the runs tables once the server answers
    threading.Thread(target=lambda: printed.extend(server.stdout), daemon=True).start()
    deadline = time.time() + 180
    while time.time() < deadline and not any("workflowType" in line for line in printed):
        if server.poll() is not None:
            pytest.fail(f"harness ui exited with {server.returncode}: {printed}")
        time.sleep(0.5)
    url = next((line.split()[-1] for line in printed if line.split()[:1] == [SWEEP]), "")
    if not url:
        server.kill()
        pytest.fail(f"harness ui printed no runs table of {SWEEP} within 180 s: {printed}")
    assert requests.get(f"{base}/health", timeout=5).ok  # printed only once the server answers
    yield UI(base, experiment_id, store, parent, cells, url)
    os.killpg(server.pid, 15)
    server.wait(timeout=30)


# --- what a user does -----------------------------------------------------------------------------
def _scrolled_text(driver, steps: int = 12) -> str:
    """The page's text with every scrolling box scrolled through: long tables (the compare view's
    metrics) render only the rows in view, a moment after they scroll into it."""
    text = ""
    for step in range(steps + 1):
        text += "\n" + driver.execute_script(
            "for (const e of document.querySelectorAll('*')) {"
            "  if (e.scrollHeight > e.clientHeight + 4) { e.scrollTop = e.scrollHeight * arguments[0]; } }"
            "window.scrollTo(0, document.body.scrollHeight * arguments[0]);"
            "return document.body.innerText", step / steps)
        time.sleep(0.3)
    driver.execute_script("for (const e of document.querySelectorAll('*')) { e.scrollTop = 0; }"
                          "window.scrollTo(0, 0);")
    return text


def _settled(read, until=lambda value: True, *, timeout: float = 60, quiet_s: float = 1.5, what: str = "the page"):
    """Poll `read()` until it returns the same value on reads at least `quiet_s` apart and
    `until(value)` holds; return that value. The UI renders in steps (rows, columns, chart counts and
    images arrive one after another), so a single read can catch it half drawn."""
    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.time() + timeout
    last, since = object(), time.time()
    while time.time() < deadline:
        try:
            value = read()
        except StaleElementReferenceException:  # re-rendered under our feet: not settled
            value = object()
        if value != last:
            last, since = value, time.time()
        elif time.time() - since >= quiet_s and until(value):
            return value
        time.sleep(0.25)
    raise AssertionError(f"{what} never settled on what the test waits for; last read: {str(last)[:600]}")


def _wait_for_text(driver, *texts: str, timeout: float = 90) -> str:
    """The page's text once it shows every one of `texts`. Read as it is a few times a second first
    (a page still drawing shows them within a moment); text still missing after SCROLL_AFTER_S
    may sit in a scrolling box whose rows render only in view, so later reads scroll through."""
    started = time.time()
    deadline = started + timeout
    body = ""
    while time.time() < deadline:
        # innerText of the whole document: the compare view's tables sit below the fold.
        body = driver.execute_script("return document.body.innerText")
        if not all(t in body for t in texts) and time.time() - started >= SCROLL_AFTER_S:
            body = _scrolled_text(driver)
        if all(t in body for t in texts):
            return body
        time.sleep(0.25)
    raise AssertionError(f"page never showed {[t for t in texts if t not in body]}; it showed: {body[:600]}")


def _click(driver, xpath: str) -> None:
    """Click an element at `xpath`, waiting for it to appear."""
    from selenium.webdriver.common.by import By

    deadline = time.time() + 60
    while time.time() < deadline:
        found = driver.find_elements(By.XPATH, xpath)
        if found:  # a visible one if any: a styled radio hides its <input>, a grid its icon buttons
            target = next((e for e in found if e.is_displayed()), found[0])
            driver.execute_script("arguments[0].click()", target)
            return
        time.sleep(0.5)
    raise AssertionError(f"nothing to click at {xpath}")


def _open_experiment(driver, ui: UI) -> None:
    """The experiment's runs table as it is without the sweep's view (docs/MLFLOW_UI.md's steps)."""
    driver.get(ui_links.runs_table(ui.experiment_id, ui.base))
    _wait_for_text(driver, ui.parent.name)
    _close_the_assistant(driver)


def _close_the_assistant(driver) -> None:
    """MLflow 3 opens its assistant panel beside the page; a user closes it to see the runs."""
    from selenium.webdriver.common.by import By

    for close in driver.find_elements(By.XPATH, "//button[@data-component-id='mlflow.assistant.chat_panel.close']"):
        if close.is_displayed():
            close.click()


def _unfold_the_sweep(driver, ui: UI) -> None:
    """Cells are child runs, folded under the sweep's parent run: unfold it as a user would (the UI
    remembers an unfolded run, and a second click would fold it again). The runs come in one
    response, so an unfolded sweep's rows are drawn with its parent's: once the table's rows have
    settled, cells missing from the page are folded. (Had they come later, the click folds them,
    and the second attempt unfolds them again.)"""
    from selenium.webdriver.common.by import By

    names = [c.name for c in ui.cells]
    expander = (f"//*[text()='{ui.parent.name}']/ancestor::div[contains(@class,'ag-cell')]"
                "//button[contains(@data-component-id,'runnamecellrenderer')]")
    _settled(lambda: len(driver.find_elements(By.CSS_SELECTOR, ".ag-row")), bool, what="the runs table's rows")
    _close_the_assistant(driver)  # again: a panel drawn after the runs would narrow the table
    if all(name in driver.execute_script("return document.body.innerText") for name in names):
        return
    for attempt in range(2):
        _click(driver, expander)
        try:
            _wait_for_text(driver, *names, timeout=(60, 90)[attempt])
            return
        except AssertionError:
            if attempt == 1:
                raise


def _search(driver, placeholder: str, text: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.XPATH, f"//input[@placeholder='{placeholder}']")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    box.send_keys(text)
    # The box holds what was typed at once; what the search then redraws is read settled by the caller.
    _settled(lambda: box.get_attribute("value"), lambda value: value == text, quiet_s=0.5,
             what=f"the '{placeholder}' box")


def _show_column(driver, name: str, shown: bool) -> None:
    """Tick or untick one column in the runs table's Columns menu (which is open)."""
    from selenium.webdriver.common.by import By

    _search(driver, "Search columns", name)
    node = f"//div[contains(@class,'du-bois-light-tree-treenode')][.//*[normalize-space(text())='{name}']]"

    def shown_nodes():
        return [n for n in driver.find_elements(By.XPATH, node) if n.is_displayed()]

    _settled(lambda: [n.get_attribute("class") for n in shown_nodes()], bool,
             what=f"the Columns menu's '{name}' (the menu offers no such column)")
    found = shown_nodes()
    if ("treenode-checkbox-checked" in found[-1].get_attribute("class")) != shown:
        found[-1].find_element(By.XPATH, f".//*[normalize-space(text())='{name}']").click()


def _screenshot(driver, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / name))


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.2f}%"


# --- the walkthrough --------------------------------------------------------------------------------
def test_the_url_harness_ui_prints_opens_the_model_training_view_in_a_fresh_profile(ui):
    """MLflow 3 opens an experiment on its GenAI traces overview in a browser that never chose the
    model-training view; the printed link (workflowType=machine_learning) opens the runs table, here
    as the view of the sweep's newest cells that its report saved (harness/report/ui_view.py)."""
    from selenium.webdriver.common.by import By

    assert ui.printed_url == ui_links.cells_view(ui.experiment_id, ui.base)

    def side_nav(url: str, row: str) -> str:  # what a fresh profile shows at url, once the page has settled
        fresh = _start_browser()
        try:
            fresh.get(url)
            body = _wait_for_text(fresh, "sparsity", "Experiments")
            deadline = time.time() + 30
            while time.time() < deadline and not any(w in body for w in ("Model registry", "Observability")):
                time.sleep(0.5)
                body = fresh.execute_script("return document.body.innerText")
            if "Model registry" in body:
                _wait_for_text(fresh, row)  # a run of the sweep is a row of the table
                assert fresh.find_elements(By.XPATH, "//input[@name='runs-view-mode' and @value='CHART']")
            return body
        finally:
            fresh.quit()

    # The control: without the parameter the same experiment opens on MLflow's GenAI view.
    assert "Observability" in side_nav(f"{ui.base}/#/experiments/{ui.experiment_id}", ui.cells[0].name)
    body = side_nav(ui.printed_url, ui.cells[0].name)
    assert "Model registry" in body and "Observability" not in body and "Detect Issues" not in body
    # The sweep ran twice; the second invocation reused both cells and made no parent of its own.
    parents = ui.store.sweep_runs(ui.experiment_id, SWEEP, parents=True)
    assert [p.run_id for p in parents] == [ui.parent.run_id] or os.environ.get("HARNESS_UI_STORE")


# What the first screen shows of each cell's row: the text of each column named, and whether its
# whole box is on screen (inside the table's viewport, above the window's bottom) and drawn (the
# browser's topmost element at its centre is the cell's own: nothing covers it).
FIRST_SCREEN = """
const [names, columns] = arguments;
const found = {};
for (const row of document.querySelectorAll('.ag-center-cols-container .ag-row, .ag-pinned-left-cols-container .ag-row')) {
  const label = [...row.querySelectorAll('a, span')].find(e => names.includes(e.innerText.trim()));
  if (label) found[label.innerText.trim()] = row.getAttribute('row-index');
}
const shown = {};
for (const [name, index] of Object.entries(found)) {
  shown[name] = {};
  for (const column of columns) {
    const cell = document.querySelector(`.ag-center-cols-container .ag-row[row-index="${index}"] [col-id="${column}"]`);
    if (!cell) continue;
    const box = cell.getBoundingClientRect(), view = cell.closest('.ag-center-cols-viewport').getBoundingClientRect();
    const top = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
    shown[name][column] = {text: cell.innerText.trim(),
      visible: box.left >= view.left - 1 && box.right <= view.right + 1 && box.bottom <= window.innerHeight
               && !!top && cell.contains(top)};
  }
}
return shown;"""


@pytest.mark.parametrize("width", [1400, 2600])
def test_the_printed_link_shows_each_cells_params_and_metrics_on_the_first_screen(ui, width):
    """The first screen of the printed link, as MLflow draws it in a fresh profile (its assistant
    panel open beside the table, as MLflow opens it on a first visit to a local server): a row per
    cell of the sweep's newest table and nothing else, with the swept value, the time, the speed-up
    and the accuracy readable without a click or a scroll, each the value the cell logged."""
    columns = ["params.`sparsity`", "metrics.`train_time_s`", "metrics.`speedup`", "metrics.`test_accuracy`"]
    first_screen = columns if width >= 2000 else columns[:3]   # 1400 px beside the assistant: three figures
    names = [c.name for c in ui.cells]
    fresh = _start_browser(width, 1000)
    try:
        fresh.get(ui.printed_url)
        shown = _settled(lambda: fresh.execute_script(FIRST_SCREEN, names, columns),
                         lambda s: set(s) == set(names) and all(len(s[n]) == len(columns) for n in names),
                         what="the cells' rows of the printed link")
        rows = _settled(lambda: len(fresh.find_elements("css selector", ".ag-center-cols-container .ag-row")),
                        what="the table's rows")
        assert rows == len(names), f"{rows} rows for the {len(names)} cells (the parent run is no row of the view)"
        figures = {c.run_id: c.metrics for c in ui.store.runs(ui.experiment_id)}
        for cell in ui.cells:
            cells = shown[cell.name]
            assert float(cells["params.`sparsity`"]["text"]) == float(cell.params["sparsity"])
            for metric in ("train_time_s", "speedup", "test_accuracy"):
                assert float(cells[f"metrics.`{metric}`"]["text"].rstrip(".…")) == pytest.approx(
                    figures[cell.run_id][metric], rel=1e-3), (cell.name, metric, cells)
            hidden = [c for c in first_screen if not cells[c]["visible"]]
            assert not hidden, f"at {width} px, {cell.name}'s {hidden} are off the first screen: {cells}"
        _screenshot(fresh, f"mlflow-cells-{width}.png")
    finally:
        fresh.quit()


def test_the_assistant_panel_stays_closed_once_closed(ui):
    """MLflow opens its assistant beside the page on a first visit to a local server and no URL or
    server option keeps it closed (docs/MLFLOW_UI.md); closed once, it stays closed in that browser."""
    from selenium.webdriver.common.by import By

    close = "//button[@data-component-id='mlflow.assistant.chat_panel.close']"
    fresh = _start_browser()
    try:
        fresh.get(ui.printed_url)
        _wait_for_text(fresh, ui.cells[0].name)
        _settled(lambda: len(fresh.find_elements(By.XPATH, close)), bool, what="the assistant panel")
        _close_the_assistant(fresh)
        fresh.get(ui.printed_url)
        fresh.refresh()
        _wait_for_text(fresh, ui.cells[0].name)
        assert _settled(lambda: len([e for e in fresh.find_elements(By.XPATH, close) if e.is_displayed()]),
                        lambda n: True, quiet_s=3) == 0
    finally:
        fresh.quit()


def test_each_cells_dataset_column_shows_the_data_it_trained_on(ui):
    """MLflow's Dataset column (shown by default, so in a fresh profile) names each cell's data and
    its digest, as the cell logged them (harness/training/dataset_record.py)."""
    from conftest import mlflow_client

    logged = {}
    for cell in ui.cells:
        (given,) = mlflow_client(ui.store).get_run(cell.run_id).inputs.dataset_inputs
        assert given.dataset.name.startswith(cell.params["dataset"]) and len(given.dataset.digest) == 16
        logged[cell.name] = f"{given.dataset.name} ({given.dataset.digest})"
    fresh = _start_browser()
    try:
        _open_experiment(fresh, ui)
        _unfold_the_sweep(fresh, ui)
        shown = _settled(lambda: fresh.execute_script("""
            const head = [...document.querySelectorAll('.ag-header-cell')].find(e => e.innerText.trim() === 'Dataset');
            if (!head) return null;
            const column = head.getAttribute('col-id'), rows = {}, found = {};
            for (const cell of document.querySelectorAll('.ag-cell')) {
              if (cell.getAttribute('col-id') !== column) continue;
              const row = cell.closest('.ag-row').getAttribute('row-index');
              rows[row] = [...cell.querySelectorAll('[title]')].map(e => e.title);
            }
            for (const name of arguments[0]) {
              const label = [...document.querySelectorAll('.ag-row a, .ag-row span')]
                .find(e => e.innerText.trim() === name);
              if (label) found[name] = rows[label.closest('.ag-row').getAttribute('row-index')] || [];
            }
            return found;""", list(logged)),
            lambda found: bool(found) and all(found.get(name) for name in logged),
            what="the Dataset column of each cell's row")
        for name, record in logged.items():
            assert record in shown[name], (name, shown)
    finally:
        fresh.quit()


def test_the_experiments_overview_shows_the_table_beside_the_published_figures(browser, ui):
    _open_experiment(browser, ui)
    _click(browser, EXPAND_DESCRIPTION)
    _wait_for_text(browser, "book accuracy", "verdict")
    ours = {f"{float(c.params['sparsity'])}" for c in ui.cells}
    table = _settled(lambda: browser.execute_script("""
        const t = [...document.querySelectorAll('table')].find(t => t.innerText.includes('book accuracy'));
        return t && [...t.rows].map(r => [...r.cells].map(c => c.innerText.trim()));"""),
        lambda t: bool(t) and ours <= {f"{float(r[0])}" for r in t[1:] if r and _is_number(r[0])},
        what="the overview's table beside the published figures, with a row per cell")
    header, rows = table[0], table[1:]
    # the readable labels of harness/report/render.py (the CSV keeps the metric names)
    for column in ("sparsity", "time (s)", "speed-up", "book speed-up", "accuracy", "book accuracy"):
        assert column in header, header
    by_sparsity = {float(r[0]): dict(zip(header, r)) for r in rows}
    assert by_sparsity[0.0]["book accuracy"] == "47.10%"  # the book's figure beside ours
    for cell in ui.cells:  # our figures, as measured by the cells (repeats run the same seed)
        row = by_sparsity[float(cell.params["sparsity"])]
        assert row["accuracy"] == _percent(cell.metrics["test_accuracy"])
        assert row["speed-up"].split()[0].endswith("x")   # with repeats, its interval follows: "1.37x [1.2, 1.5]"
    plot = _settled(lambda: browser.execute_script("""
        const img = [...document.querySelectorAll('img')].find(i => i.src.includes('get-artifact'));
        const link = [...document.querySelectorAll('a')].find(a => a.href.includes('/artifacts/report/'));
        return [img && img.complete && img.naturalWidth, link && link.href];"""),
        lambda p: bool(p[0]) and p[0] > 300 and bool(p[1]), what="the plot in the overview (it did not load)")
    assert plot[1].endswith(f"/runs/{ui.parent.run_id}/artifacts/report/{SWEEP}.png?workflowType=machine_learning")
    _screenshot(browser, "mlflow-overview.png")
    _click(browser, FOLD_DESCRIPTION)  # folded again (the UI remembers), so the runs show below it


def test_the_sweep_unfolds_to_its_cells_with_the_columns_a_user_picks(browser, ui):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    _open_experiment(browser, ui)
    _unfold_the_sweep(browser, ui)
    _click(browser, "//button[contains(@data-component-id,'experimentviewrunscolumnselector')]")
    for name, shown in (("Dataset", False), ("Source", False), ("Models", False), ("sparsity", True),
                        ("train_time_s", True), ("test_accuracy", True), ("speedup", True)):
        _show_column(browser, name, shown)
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
    picked = {"sparsity", "train_time_s", "test_accuracy", "speedup"}
    headers = _settled(lambda: browser.execute_script(
        "return [...document.querySelectorAll('.ag-header-cell')].map(e => e.innerText.trim())"),
        lambda h: picked <= set(h), what="the runs table's columns")
    for name in ("sparsity", "train_time_s", "test_accuracy", "speedup"):
        assert name in headers, headers
    assert "Dataset" not in headers and "Source" not in headers
    _screenshot(browser, "mlflow-runs.png")


def test_the_chart_view_charts_the_cells_metrics_and_no_bookkeeping(browser, ui):
    import re

    assert ui.parent.metrics == {}, "the sweep's parent run holds metrics: they would be charts"
    charted = {k for run in ui.store.runs(ui.experiment_id) for k in run.metrics}
    _open_experiment(browser, ui)
    _unfold_the_sweep(browser, ui)
    _click(browser, "//input[@name='runs-view-mode' and @value='CHART']")
    def charts() -> int | None:  # the count MLflow shows beside the section's title
        found = re.search(r"Model metrics\s*\((\d+)\)", browser.execute_script("return document.body.innerText"))
        return int(found.group(1)) if found else None

    _wait_for_text(browser, "Model metrics")
    shown = _settled(charts, lambda n: n is not None, what="the chart view's count of charts")
    assert shown == len(charted), f"{shown} charts for the {len(charted)} metrics of the cells"
    _search(browser, "Search metric charts", "cells_")
    _wait_for_text(browser, "No metric charts")
    # anchored: pretrain_time_s would match train_time_s
    _search(browser, "Search metric charts", "^(train_time_s|test_accuracy|speedup)$")
    _wait_for_text(browser, "train_time_s", "test_accuracy", "speedup")
    assert _settled(charts, lambda n: n is not None, what="the searched charts' count") == 3
    _screenshot(browser, "mlflow-charts.png")


def test_the_compare_view_of_two_pruning_cells_lists_only_what_pruning_reads(browser, ui):
    first, last = ui.cells[0], ui.cells[-1]
    runs = json.dumps([first.run_id, last.run_id])
    browser.get(f"{ui.base}/#/compare-runs?runs={urllib.parse.quote(runs)}"
                f"&experiments={urllib.parse.quote(json.dumps([ui.experiment_id]))}&{ui_links.WORKFLOW}")  # model training
    body = _wait_for_text(browser, first.name, last.name, "train_time_s", "test_accuracy", "speedup", "param_count")

    def params() -> list[str] | None:  # the names in the Parameters table, once it is drawn
        lines = browser.execute_script("return document.body.innerText").splitlines()
        if "Parameters" not in lines:
            return None
        start = len(lines) - 1 - lines[::-1].index("Parameters")
        if "Metrics" not in lines[start:]:
            return None
        return [line.split("\t")[0] for line in lines[start + 1:lines.index("Metrics", start)]
                if line and line != "Show diff only"]

    params = _settled(params, bool, what="the compare view's Parameters table")
    assert {"sparsity", "pruning_backend", "lr", "epochs"} <= set(params), params
    pruning = experiments.get("pruning")
    unread = [p for p in params if p not in pruning.reads]
    assert not unread, f"the compare view lists params pruning never reads: {unread}"
    for cell in (first, last):
        assert f"{cell.metrics['param_count']:.0f}" in body.replace(",", "")
    _close_the_assistant(browser)
    # Fold the plots above, as a user does to read the params and metrics side by side.
    _click(browser, "//*[normalize-space(text())='Visualizations']")
    time.sleep(1)
    _screenshot(browser, "mlflow-compare.png")
