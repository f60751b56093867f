// fork_safety.cc: the library's OpenMP threads across fork() (qmx/threads.h). libgomp keeps its thread pool
// in process memory; after fork() the child has that memory but not the threads, and its next parallel
// region waits forever for them. A child of a process that ran a parallel qmx call therefore runs on one
// thread: the pthread_atfork child handler sets its OpenMP thread count to 1, and a region of one thread
// never touches the pool.
#include <omp.h>
#include <pthread.h>

#include <atomic>
#include <string>

#include "qmx/threads.h"

namespace qmx {
namespace {

std::atomic<bool> g_forked{false};

extern "C" void QmxAfterForkInChild() {
  g_forked.store(true);
  omp_set_num_threads(1);
}

struct ForkHandler {
  ForkHandler() { ::pthread_atfork(nullptr, nullptr, QmxAfterForkInChild); }
};

}  // namespace

void InstallForkHandler() { static const ForkHandler handler; }

bool InForkedChild() { return g_forked.load(); }

void SetNumThreads(int n) {
  if (n < 1 || n > 1024) throw Error("the thread count must be 1..1024, not " + std::to_string(n));
  if (n > 1 && InForkedChild())
    throw Error("this process is a fork() child of one that ran OpenMP threads, and libgomp cannot start threads "
                "again in it: qmx runs on one thread here (start workers with the 'spawn' or 'forkserver' method "
                "for threads in each)");
  omp_set_num_threads(n);
}

}  // namespace qmx
