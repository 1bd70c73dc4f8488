"""The part of a dataset's check that needs no decoding: an image-folder dataset's train/ and test/
folders exist, and a dataset torchvision downloads is in data_dir or can be downloaded from here.
The command line asks it of every cell before torch is loaded (before the calibration, and before
anything is created: a download tried and failed left an empty data/ folder behind), and
harness/training/data.py asks the folders again before it decodes them."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

from harness.fields.catalogue import DOWNLOADS, IMAGE_FOLDER_DATASETS
from harness.errors import UserError
from harness.suggest import shown_path

# Set (to anything but 0 or empty) on a machine that downloads nothing: a dataset not in data_dir is
# then refused at once, without asking the network (the tests and `make bench-cli` set it).
OFFLINE_ENV = "HARNESS_OFFLINE"
# How long the download host may take to accept a connection: offline, the name lookup fails in
# milliseconds; a resolver that hangs is given up on after this.
REACH_TIMEOUT_S = 2.0


def check_class_folders(dataset: str, data_dir: str) -> None:
    """UserError naming the missing folder when `dataset` reads class folders and `data_dir` lacks
    its train/ or test/; other datasets are downloaded or made, and are not checked here."""
    if dataset not in IMAGE_FOLDER_DATASETS:
        return
    root = Path(data_dir)
    missing = [d for d in ("train", "test") if not (root / d).is_dir()]
    if missing:
        raise UserError(
            f"dataset '{dataset}' needs class folders under '{root}/train' and '{root}/test' "
            f"('{root}/{missing[0]}' is missing); set data_dir to such a folder (data_dir: {shown_path(root)})."
        )


def check_downloadable(dataset: str, data_dir: str) -> None:
    """UserError when `dataset` is one torchvision downloads, is not in `data_dir`, and this machine
    cannot reach the address it comes from (or is declared offline)."""
    download = DOWNLOADS.get(dataset)
    if download is None or all((Path(data_dir) / f).is_file() for f in download.files):
        return
    host = urlsplit(download.url).hostname
    if offline():
        why = f"this machine is declared offline ({OFFLINE_ENV})"
    elif not reachable(host, 443 if download.url.startswith("https") else 80):
        why = f"{host} cannot be reached from here to download it"
    else:
        return   # the first cell downloads it
    raise UserError(f"dataset '{dataset}' is not in data_dir {shown_path(data_dir)} and {why}; "
                    f"{download.how_to_provide}.")


def offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def reachable(host: str, port: int, timeout: float = REACH_TIMEOUT_S) -> bool:
    """Whether a TCP connection to host:port opens within `timeout`, name lookup included (which
    socket's own timeout does not bound: it runs in a thread that is waited for at most that long)."""
    answer: list[bool] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            answer.append(True)
        except OSError:
            answer.append(False)

    thread = threading.Thread(target=connect, name="download-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(answer and answer[0])
