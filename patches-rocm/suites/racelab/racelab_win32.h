// racelab_win32.h: pre-included (-include) into the exported pinned.cu for the
// race lab's Windows-HIP build of it (docs/race-lab.md, "Fix 3"). The real
// headers are read first, as on Linux; then _WIN32 selects the file's Windows
// HIP branch, whose Win32 calls come from win/windows.h (our model).
#pragma once

#include <hip/hip_runtime.h>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#define _WIN32 1
