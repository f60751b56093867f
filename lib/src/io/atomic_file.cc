// atomic_file.cc: the atomic file writer of qmx/io.h (WriteFileAtomic, WriteBytesAtomic) that every
// qmx-sim output writer (npy, safetensors, CSV, JSON) goes through: a temporary file, fsync, rename. POSIX.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "qmx/error.h"
#include "qmx/io.h"

namespace qmx {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

// SIGINT / SIGTERM / SIGHUP while a temporary file is open: the handler removes it (unlink is
// async-signal-safe), puts back the handler that was there before and raises the signal again, so an
// interrupted qmx-sim leaves neither the output nor its temporary behind. The handlers are installed only
// for the duration of one write (a host process such as Python keeps its own otherwise); one write at a
// time holds the slot.
char g_tmp_path[4096];
std::atomic<bool> g_tmp_set{false};
struct sigaction g_old_actions[3];
constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void RemoveTmpOnSignal(int sig) {
  if (g_tmp_set.exchange(false)) ::unlink(g_tmp_path);
  for (int i = 0; i < 3; ++i)
    if (kSignals[i] == sig) ::sigaction(sig, &g_old_actions[i], nullptr);
  ::raise(sig);
}

struct TmpGuard {
  bool held = false;
  explicit TmpGuard(const std::string& tmp) {
    if (tmp.size() >= sizeof g_tmp_path || g_tmp_set.load()) return;
    std::memcpy(g_tmp_path, tmp.c_str(), tmp.size() + 1);
    struct sigaction sa {};
    sa.sa_handler = RemoveTmpOnSignal;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], nullptr, &g_old_actions[i]);
    g_tmp_set.store(true);
    held = true;
    for (int i = 0; i < 3; ++i)
      if (g_old_actions[i].sa_handler != SIG_IGN) ::sigaction(kSignals[i], &sa, nullptr);  // nohup: keep ignoring
  }
  ~TmpGuard() {
    if (!held) return;
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &g_old_actions[i], nullptr);
    g_tmp_set.store(false);
  }
};

// Why a temporary in `path`'s directory cannot be created, in words: a missing directory is named.
std::string CreateFailure(const std::string& path, const std::string& tmp, int err) {
  if (err == ENOENT) {
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    return "cannot write '" + path + "': the directory '" + dir.string() + "' does not exist";
  }
  return "cannot write '" + path + "': cannot create '" + tmp + "': " + ErrnoText(err);
}

// Writes all of [data, data+size) to fd, retrying short writes and EINTR.
bool WriteAll(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void WriteBytesAtomicImpl(const std::string& path, const uint8_t* data, size_t size) {
  const std::string tmp = path + ".tmp." + std::to_string(static_cast<long>(::getpid()));
  const TmpGuard guard(tmp);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    int err = errno;
    throw IoError(CreateFailure(path, tmp, err));
  }
  auto fail = [&](const std::string& step, int err) {
    ::unlink(tmp.c_str());
    throw IoError("cannot write '" + path + "': " + step + ": " + ErrnoText(err));
  };
  if (!WriteAll(fd, data, size)) {
    int err = errno;
    ::close(fd);
    fail("write to '" + tmp + "' failed", err);
  }
  // fsync before rename: otherwise a crash can leave the new name pointing at
  // an empty or partial file on some filesystems.
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    fail("fsync of '" + tmp + "' failed", err);
  }
  if (::close(fd) != 0) fail("close of '" + tmp + "' failed", errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    fail("rename of '" + tmp + "' failed", errno);
  }
  // Best effort: persist the rename itself. The data is already safe and the
  // file is in place, so a failure here is not worth reporting.
  size_t slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    (void)::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace

void WriteFileAtomic(const std::string& path, const std::string& contents) {
  WriteBytesAtomicImpl(path, reinterpret_cast<const uint8_t*>(contents.data()), contents.size());
}

void WriteBytesAtomic(const std::string& path, const uint8_t* data, size_t size) {
  WriteBytesAtomicImpl(path, data, size);
}

void CreateOutputDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::path p(dir);
  while (!p.empty() && !p.has_filename() && p != p.root_path()) p = p.parent_path();  // "out/" -> "out"
  if (std::filesystem::is_directory(p, ec)) return;
  if (std::filesystem::exists(p, ec)) throw IoError("cannot use '" + dir + "' as an output directory: it is a file");
  std::filesystem::create_directories(p, ec);
  if (ec) throw IoError("cannot create the output directory '" + dir + "': " + ec.message());
}

}  // namespace qmx
