"""The exit statuses of every `harness` command, in one place: the command line returns them, and
`harness reproduce` reads them back from the sweeps it runs as children."""

from __future__ import annotations

EXIT_FAILED_CELLS = 1   # some cells failed at run time (each recorded with its reason)
EXIT_FAULT = 1          # the machine or the store refused (disk full, a file made read-only)
EXIT_USAGE = 2          # a mistake of the user's, said in one sentence
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM
