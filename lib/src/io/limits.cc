// limits.cc: the input limits of qmx/io.h: readers open regular files only (OpenRegularFile), and every
// reader and command that allocates from a declared or requested size checks the bytes against the memory
// ceiling first, so a hostile or mistaken size gives a message instead of a hang or an out-of-memory kill.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "qmx/error.h"
#include "qmx/io.h"

namespace qmx {

namespace {

std::string Gib(uint64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes < (uint64_t{1} << 20)) std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  else if (bytes < (uint64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  else std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  return buf;
}

}  // namespace

std::FILE* OpenRegularFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO with no writer would otherwise block forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw IoError("cannot open '" + path + "': " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError("cannot read '" + path + "': not a regular file");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::FILE* f = ::fdopen(fd, "rb");
  if (f == nullptr) {
    const int err = errno;
    ::close(fd);
    throw IoError("cannot open '" + path + "': " + std::strerror(err));
  }
  return f;
}

std::vector<uint8_t> ReadRegularFile(const std::string& path, uint64_t copies) {
  // A regular file of known size, read once: a FIFO or a device (/dev/zero) would never end.
  std::FILE* f = OpenRegularFile(path);
  struct stat st {};
  if (::fstat(::fileno(f), &st) != 0) {
    const int err = errno;
    std::fclose(f);
    throw IoError("cannot stat '" + path + "': " + std::strerror(err));
  }
  try {
    CheckMemoryCeiling(copies * static_cast<uint64_t>(st.st_size), "reading '" + path + "'");
  } catch (...) {
    std::fclose(f);
    throw;
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  const size_t got = bytes.empty() ? 0 : std::fread(bytes.data(), 1, bytes.size(), f);
  const int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (got != bytes.size())
    throw IoError("cannot read '" + path + "': " + (err ? std::strerror(err) : "it changed size while being read"));
  return bytes;
}

uint64_t ParseByteSize(const std::string& text) {
  const std::string why = "a byte count looks like 4096, 512M, 8G or 1T (binary units), not '" + text + "'";
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 15) throw Error(why);
  uint64_t v = std::stoull(text.substr(0, i));
  std::string unit = text.substr(i);
  if (unit == "iB" || unit == "B") unit.clear();
  if (unit.size() >= 2 && (unit.substr(1) == "iB" || unit.substr(1) == "B")) unit = unit.substr(0, 1);
  int shift = 0;
  if (unit.empty()) shift = 0;
  else if (unit == "K" || unit == "k") shift = 10;
  else if (unit == "M") shift = 20;
  else if (unit == "G") shift = 30;
  else if (unit == "T") shift = 40;
  else throw Error(why);
  if (v == 0 || v > (UINT64_MAX >> shift)) throw Error(why);
  return v << shift;
}

uint64_t MemoryCeiling() {
  if (const char* env = std::getenv("QMX_MAX_MEMORY"); env != nullptr && *env != '\0') {
    try {
      return ParseByteSize(env);
    } catch (const Error& e) {
      throw Error(std::string("QMX_MAX_MEMORY: ") + e.what());
    }
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return UINT64_MAX;
  return static_cast<uint64_t>(pages) / 5 * 4 * static_cast<uint64_t>(page);  // 80% of physical memory
}

void CheckMemoryCeiling(uint64_t bytes, const std::string& what) {
  const uint64_t ceiling = MemoryCeiling();
  if (bytes > ceiling)
    throw Error(what + " needs " + Gib(bytes) + ", more than the memory ceiling of " + Gib(ceiling) +
                (std::getenv("QMX_MAX_MEMORY") != nullptr ? " (QMX_MAX_MEMORY)"
                                                          : " (80% of physical memory; QMX_MAX_MEMORY=64G sets another)"));
}

}  // namespace qmx
