// fork.h: the fork's helpers
#pragma once

inline int fork_helper(int x) { return x * 2; }
