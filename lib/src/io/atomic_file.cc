// atomic_file.cc: the atomic file writer of qmx/io.h (WriteFileAtomic, WriteBytesAtomic) that every
// qmx-sim output writer (npy, safetensors, CSV, JSON) goes through: a temporary file, fsync, rename. POSIX.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "qmx/error.h"
#include "qmx/io.h"

namespace qmx {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

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
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    int err = errno;
    throw IoError("cannot write '" + path + "': cannot create '" + tmp + "': " + ErrnoText(err));
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

}  // namespace qmx
