// util.h: upstream helpers
#pragma once

inline int up_helper(int x) { return x + 1; }
