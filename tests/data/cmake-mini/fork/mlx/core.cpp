#include "mlx/util.h"
#include "mlx/fork.h"
// core line 3
// core line 4
int core_fork() { return fork_helper(5); }
// core line 6
// core line 7
// core line 8
// core line 9
// core line 10
// core line 11
// core line 12
// core line 13
// core line 14
// core line 15
// core line 16
// core line 17
// core line 18
// core line 19
int core_value() { return 20; }
// core line 21
// core line 22
// core line 23
// core line 24
// core line 25
// core line 26
// core line 27
// core line 28
// core line 29
// core line 30
