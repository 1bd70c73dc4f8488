"""The port a local server (`harness ui`, `harness dashboard`) is asked to listen on, checked before
anything slow starts: in range, free on the loopback address, and one a browser will open."""

from __future__ import annotations

import socket
import sys

from harness.errors import UserError

HOST = "127.0.0.1"

# The Fetch standard's "bad ports" (fetch.spec.whatwg.org, port blocking): Chromium answers them with
# ERR_UNSAFE_PORT and Firefox refuses them too, so a server there works for curl and no browser.
BROWSER_BLOCKED_PORTS = frozenset({
    0, 1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103,
    104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465, 512, 513,
    514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993, 995, 1719, 1720,
    1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080,
})


def check_port(port: int, make_target: str) -> None:
    """One sentence when `port` cannot be served on; a warning naming a free port browsers open when
    browsers would refuse it (the server still starts: curl and scripts reach it)."""
    if not 1 <= port <= 65535:  # socket.bind would raise OverflowError, no OSError, for these
        raise UserError(f"--port must be between 1 and 65535 (got {port}).")
    if not is_free(port):
        raise UserError(f"port {port} on {HOST} is already in use (another UI?); pass --port "
                        f"(make {make_target} PORT=...).")
    if port in BROWSER_BLOCKED_PORTS:
        safe = browser_safe_port(port)
        print(f"harness: warning: browsers refuse port {port} (Chromium: ERR_UNSAFE_PORT), so the page will "
              f"not open in one; port {safe} is free and allowed (make {make_target} PORT={safe}).",
              file=sys.stderr, flush=True)


def is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def browser_safe_port(port: int) -> int:
    """The first port above `port` that browsers open and nothing listens on."""
    candidate = port + 1
    while candidate in BROWSER_BLOCKED_PORTS or candidate < 1024 or not is_free(candidate):
        candidate += 1
    return candidate
