"""Test child: ignores SIGINT, SIGTERM and SIGHUP, prints a line, then sleeps far past
any test deadline (only SIGKILL ends it)."""

import os
import signal
import time

for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(signum, signal.SIG_IGN)
print("stubborn: started", os.getpid(), flush=True)
time.sleep(300)
