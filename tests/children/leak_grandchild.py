"""Test child: starts a grandchild that sleeps, writes its pid to argv[1], then
exits 0 (argv[2] == "exit") or sleeps too (argv[2] == "hang"). The runner must
kill the grandchild with the child's process group either way."""

import subprocess
import sys
import time

pidfile, mode = sys.argv[1], sys.argv[2]
gc = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(300)"],
    stdin=subprocess.DEVNULL,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
)
with open(pidfile, "w") as fh:
    fh.write(str(gc.pid))
print("overlay-suite: done", flush=True)
if mode == "hang":
    time.sleep(300)
