"""The command server: a warm overlay that runs each command in a fork of itself.

Every ``overlay`` command starts Python and imports click and the modules of its
work before it does any: 0.07 s of CPU for the import of the CLI alone, and about
0.04 s more for a pin bump's modules, on the benchmark machine (docs/benchmarks.md).
A command server pays that once. ``overlay server start`` starts one process that
imports overlay's modules and waits on a Unix socket; an ``overlay`` command that
finds it sends its argument list, working directory, environment, umask and its
standard input, output and error (the descriptors themselves, ``SCM_RIGHTS``), and
the server forks a *worker* that becomes that command: it runs in the caller's
directory and environment, writes to the caller's terminal or pipes, and its exit
status is the caller's. This is the shape of Mercurial's ``chg``, with a Python
client that loads nothing but C modules (:mod:`overlay.server.client`).

The modules:

* :mod:`overlay.server.wire` -- where the socket is, what a message is, what must
  match between a caller and the server (the interpreter's own settings);
* :mod:`overlay.server.client` -- the caller's side, run by ``overlay`` before it
  imports anything else: ``None`` (run the command here) whenever no server answers
  or the server declines;
* :mod:`overlay.server.daemon` -- the server: the socket, the forks, the caller's
  signals passed to its worker, the exit statuses, the log;
* :mod:`overlay.server.worker` -- what a fork does to become the caller's command.

Nothing runs through a server that was not started by the user
(``overlay server start``); ``OVERLAY_SERVER=off`` keeps a command in its own
process. docs/server.md is the user's side of it.
"""
