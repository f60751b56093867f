// slow_tmp_open.c: an LD_PRELOAD shim for the fatal-signal tests of test_cli_hostile_fs.cc. Its open() calls
// the real one (64-bit glibc has no separate open64 for the CLI to call) and, when that has just created a
// file whose name holds ".tmp." (an output's temporary), sleeps QMX_SLOW_TMP_MS milliseconds before
// returning. That holds a writer in the moment between a temporary's creation and its next step, so a test
// can deliver a signal there every time instead of by luck.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

typedef int (*OpenFn)(const char*, int, ...);

static void HoldIfTemporary(const char* path, int flags) {
  if ((flags & O_CREAT) == 0 || strstr(path, ".tmp.") == NULL) return;
  const char* ms = getenv("QMX_SLOW_TMP_MS");
  const long n = ms != NULL ? atol(ms) : 0;
  struct timespec left = {n / 1000, (n % 1000) * 1000000L};
  const int saved = errno;
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
  errno = saved;
}

int open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if ((flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE) {
    va_list ap;
    va_start(ap, flags);
    mode = (mode_t)va_arg(ap, int);
    va_end(ap);
  }
  const OpenFn real = (OpenFn)dlsym(RTLD_NEXT, "open");
  if (real == NULL) {
    errno = ENOSYS;
    return -1;
  }
  const int fd = real(path, flags, mode);
  if (fd >= 0) HoldIfTemporary(path, flags);
  return fd;
}
