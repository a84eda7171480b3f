"""Test child: prints report lines on stderr as the race lab's children and sanitizers do.

Usage: reports.py RC [LINE...]. Each LINE is written to stderr as is (``TSAN``
stands for a ThreadSanitizer data race header, ``ASAN`` for an AddressSanitizer
heap-use-after-free header); then, when RC is 0, ``overlay-suite: done`` on
stdout; the exit status is RC.
"""

import sys

rc = int(sys.argv[1])
canned = {
    "TSAN": "WARNING: ThreadSanitizer: data race (pid=4242)",
    "ASAN": "==4242==ERROR: AddressSanitizer: heap-use-after-free on address 0x6020 at pc 0x55 bp 0x7f",
}
for line in sys.argv[2:]:
    print(canned.get(line, line), file=sys.stderr)
if rc == 0:
    print("overlay-suite: done")
sys.exit(rc)
