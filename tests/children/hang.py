"""Test child: prints a line, then sleeps far past any test deadline."""

import sys
import time

print("hang: started", flush=True)
print("hang: sleeping", file=sys.stderr, flush=True)
time.sleep(300)
print("overlay-suite: done")
