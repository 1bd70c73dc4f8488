"""Recompute this folder's tables from store/ without the harness: every row's medians, the IQR of
its time, its rounds and seeds, each cell's MFU, every interval's bounds (the accuracy's over seeds,
the speed-up's over rounds), the published figures, and every verdict with its class and the
table's headline, each checked against the CSVs, verdicts.csv and REPRODUCTION.md beside it (and a
JPEG quality ladder, when the folder holds one). The reading is results/recompute/'s, one
reader for every folder of tables; this file runs it on the folder it is in. It needs numpy, scipy
and pandas (the project's .venv/bin/python has them):

    .venv/bin/python results/FOLDER/recompute.py      # FOLDER: the folder this copy is in (results/README.md gives each command)
"""
import pathlib
import runpy
import sys

HERE = pathlib.Path(__file__).resolve().parent
READER = next(p for p in HERE.parents if p.name == "results") / "recompute" / "recompute_folder.py"
sys.argv = [str(READER), str(HERE)]
runpy.run_path(str(READER), run_name="__main__")
