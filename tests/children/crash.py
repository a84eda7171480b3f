"""Test child: kills itself with a signal (argv[1]: SIGSEGV or SIGABRT), no core file."""

import os
import resource
import signal
import sys

resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
name = sys.argv[1] if len(sys.argv) > 1 else "SIGSEGV"
print("crash: about to die", flush=True)
os.kill(os.getpid(), getattr(signal, name))
print("overlay-suite: done")
