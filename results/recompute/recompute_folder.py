"""Recompute a results folder's tables, their intervals and their verdicts from its store, without the
harness: a reader's check that the committed store, not our code, holds every figure on the page.

    .venv/bin/python results/cpu-2core/recompute.py    # each folder of tables has one; it runs this on itself

It needs numpy, scipy and pandas (the project's .venv/bin/python has them) and reads only:
- the folder's store/mlflow.db (read-only), its <sweep>.csv tables, verdicts.csv and REPRODUCTION.md;
- the sweep files in sweeps/ (each table's axes, baseline, published rows and checks), a file that
  extends another merged by harness/specs/extends.py (standard library only, loaded by its path).

For each table on the page, from the store alone, by the rules the page states in its Conventions:
- its cells: the sweep's finished cells of the newest measurement procedure, at the newest scale;
- each row (a grid point): the median of every metric over its rounds, the IQR of its time, its
  rounds and seeds, the MFU of each cell from what it was computed from; the accuracy's 95% interval
  over the seeds; the speed-up over the baseline row, a ratio of medians over the rounds both ran,
  with its 95% interval; the efficiency; each interval cut where the figure physically stops;
- every figure compared with the table's CSV (to 1e-9), and the published figures with the sweep file;
- every check in the sweep file judged again, with its class and whether it is the table's headline,
  compared with verdicts.csv and with the page's rows; the page's summary counts recounted.
The intervals are the bootstrap's (2,000 draws, or 400 resampled rounds, from seed 20, as the
Conventions say), so they come out exactly, not approximately. A JPEG quality ladder (jpeg-ladder/)
is checked run by run against the store, with its paired differences, bends and fitted line.
"""
from __future__ import annotations

import csv
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))   # the reader's own modules, beside it

from judge_again import Judge, class_of, count_line, facts_of, headline   # noqa: E402
from ladder_again import check_ladder   # noqa: E402
from read_store import Store, load_sweep, table_cells   # noqa: E402
from row_figures import Table   # noqa: E402


def check_folder(folder: pathlib.Path) -> int:
    root = next(p for p in folder.resolve().parents if (p / "sweeps").is_dir())
    store = Store(folder)
    page = (folder / "REPRODUCTION.md").read_text()
    lines = list(csv.DictReader(open(folder / "verdicts.csv")))
    checked, judged_all = 0, []
    for sweep in dict.fromkeys(line["sweep"] for line in lines):
        mine = [line for line in lines if line["sweep"] == sweep]
        fingerprints = {line["fingerprint"] for line in mine}
        assert len(fingerprints) == 1, f"{sweep}: tables of {len(fingerprints)} machines; this reader takes one"
        spec = load_sweep(root, sweep)
        cells, failed, scale = table_cells(store, sweep, fingerprints.pop())
        table = Table(folder, spec, cells, scale)
        table.check_figures()
        judge = Judge(table, facts_of(cells, failed))
        judged = []
        for check, line in zip(spec.get("checks", []), mine, strict=True):
            verdict, stand_in, n = judge.judge(check)
            klass = class_of(check, stand_in)
            label = f"{verdict} (stand-in)" if stand_in and verdict != "DIFFERS: machine" else verdict
            found = (line["check"], line["verdict"], line["stand_in"], line["class"], line["n"])
            assert found == (check.get("text") or f"{check['kind']} check of {check['metric']}", verdict,
                             str(int(stand_in)), klass, str(n)), (sweep, found, (verdict, stand_in, klass, n))
            assert f"| {line['check']} | **{label}** |" in page, (sweep, line["check"], label)
            judged.append((verdict, klass))
        top = headline(judged)
        assert [line["headline"] for line in mine] == ["1" if i == top else "0" for i in range(len(mine))], sweep
        judged_all += judged
        print(f"== {sweep}: {len(cells)} cells, {table.checked} figures as the CSV's; checks: {count_line(judged)}")
        checked += table.checked + len(judged)
    summary = count_line(judged_all)
    assert f"; checks: {summary}.**" in page, summary
    print(f"the page's counts: {summary}")
    return checked + check_ladder(folder, store)


if __name__ == "__main__":
    here = pathlib.Path(sys.argv[1])
    print(f"{check_folder(here)} figures and verdicts recomputed from {here}/store, each as the committed files say")
