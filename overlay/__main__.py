"""The entry point of the ``overlay`` command (``bin/overlay``) and of ``python -m overlay``.

It first hands the command to a command server where one runs
(:mod:`overlay.server`), and imports nothing but :mod:`sys`, :mod:`gc` and the
server's C-only client before it guards the import of the CLI: a Ctrl-C in the
first half second lands while click, rich and the command modules are being
imported, before :class:`overlay.cli.tools.OverlayGroup` handles interrupts, and
Python would print a traceback. Here it is one ``overlay:
interrupted`` line and exit 130, as everywhere else.
"""

import gc
import sys

#: Allocations between two collections of the youngest generation (CPython's default:
#: 700). A command is a short process that builds many objects and almost no cycles:
#: at the default a pin bump starts some fifty collections that free a few hundred
#: objects, 3 % of its instructions (docs/engine.md, "Costs behind some choices").
#: Collection stays on, so a long run (a suite, a thousand-patch series) still frees
#: the cycles it leaves.
GC_YOUNG_THRESHOLD = 50_000

#: :data:`overlay.errors.EXIT_INTERRUPTED`, repeated: importing that module is part
#: of the window this module guards.
_EXIT_INTERRUPTED = 130


def main() -> None:
    """Run the ``overlay`` command line and exit with its status: in a command server
    of this interpreter and package where one runs (``overlay server start``;
    :mod:`overlay.server.client` loads only C modules to find out), else here
    (:func:`run`).

    Raises:
        SystemExit: always (the command's status; 130 when interrupted).
    """
    try:
        # in the try: a Ctrl-C while the client loads is caught below, as in run()
        from overlay.server.client import served

        status = served(sys.argv[1:])
    except KeyboardInterrupt:
        # before the client passes signals on (a request already sent: the server
        # sees this process go and hangs the worker up)
        _interrupted()
    if status is not None:
        sys.exit(status)
    run()


def run() -> None:
    """Run the ``overlay`` command line in this process and exit with its status (a
    command server's worker runs this too).

    Raises:
        SystemExit: always (the command's status; 130 when interrupted).
    """
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    try:
        # in the try: a Ctrl-C while click and the commands load is caught below
        from overlay.cli import main as cli

        cli()
    except KeyboardInterrupt:
        # Only an interrupt outside the group's own handler gets here (during the
        # imports, or in the instant before click starts).
        _interrupted()
    finally:
        # The interpreter's shutdown collects every generation, four times: after a
        # command, full scans of all it imported (7 % of `overlay status`), to free
        # memory the process gives back by ending anyway. Frozen objects are left to
        # that end; the command closed its files, and atexit handlers still run.
        gc.freeze()


def _interrupted() -> None:
    """End with ``overlay: interrupted`` and status 130, ignoring a second Ctrl-C.

    Raises:
        SystemExit: always.
    """
    import signal  # only an interrupt needs it

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C: no traceback
    sys.stderr.write("overlay: interrupted\n")
    sys.stderr.flush()
    sys.exit(_EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
