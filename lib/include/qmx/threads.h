// threads.h: the OpenMP threads the library's parallel calls use, and what happens to them across fork().
#pragma once

#include "qmx/error.h"

namespace qmx {

// Registers (once; later calls do nothing) a pthread_atfork child handler that sets a forked child's OpenMP
// threads to 1: libgomp's thread pool does not survive fork(), and a child that started a parallel region
// of more threads would wait for them forever (Python's multiprocessing "fork", PyTorch DataLoader workers).
// The library calls it at start-up (a static initializer beside the format registry, which every program
// that uses the library links); results do not depend on the thread count.
void InstallForkHandler();
// True in a process forked after InstallForkHandler.
bool InForkedChild();
// omp_set_num_threads(n) for the library's calls; qmx::Error for n outside 1..1024, or above 1 in a forked
// child (which must stay on one thread).
void SetNumThreads(int n);

}  // namespace qmx
