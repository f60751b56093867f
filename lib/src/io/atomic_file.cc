// atomic_file.cc: the atomic file writers of qmx/io.h (WriteFileAtomic, WriteBytesAtomic, AtomicFileSet) that
// every qmx-sim output writer (npy, safetensors, CSV, JSON, golden files) goes through: an exclusively created
// temporary in the output's directory, fsync, rename; character devices and FIFOs are written through. POSIX.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "qmx/error.h"
#include "qmx/io.h"

namespace qmx {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

// ---- The temporaries a fatal signal must remove ------------------------------------------------------
//
// Every temporary lives in a node of one global list. Nodes are never freed, only reused, so a signal
// handler can walk the list at any moment: it unlinks the path of every node marked live (unlink is
// async-signal-safe), puts back the default action and raises the signal again, so a killed qmx-sim leaves
// neither its outputs nor their temporaries behind. The handlers are installed while at least one temporary
// exists, and only for signals whose action is the default one (termination): a host process's own handler
// (Python's SIGINT, a study's interrupt flag) is left alone, and the write it interrupts then ends normally
// or throws, removing its temporaries on the way out.
struct TmpNode {
  std::atomic<bool> live{false};
  std::atomic<TmpNode*> next{nullptr};
  char* path = nullptr;
  size_t cap = 0;
};
std::atomic<TmpNode*> g_tmp_head{nullptr};
std::mutex g_tmp_mutex;
int g_live = 0;  // under g_tmp_mutex

// Every catchable signal whose default action ends the process.
constexpr int kFatalSignals[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGILL,  SIGTRAP,   SIGABRT, SIGBUS,  SIGFPE,
                                 SIGUSR1, SIGSEGV, SIGUSR2, SIGPIPE, SIGALRM,   SIGTERM, SIGXCPU, SIGXFSZ,
                                 SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGSYS};
constexpr int kNumFatal = sizeof kFatalSignals / sizeof kFatalSignals[0];
bool g_installed[kNumFatal];  // under g_tmp_mutex: whether our handler holds that signal

extern "C" void RemoveTmpsOnSignal(int sig) {
  const int saved = errno;
  for (TmpNode* n = g_tmp_head.load(std::memory_order_acquire); n != nullptr; n = n->next.load(std::memory_order_acquire))
    if (n->live.exchange(false)) ::unlink(n->path);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  errno = saved;
  ::raise(sig);  // blocked until the handler returns, then delivered with the default action
}

void InstallHandlers() {  // under g_tmp_mutex
  struct sigaction sa {};
  sa.sa_handler = RemoveTmpsOnSignal;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < kNumFatal; ++i) {
    struct sigaction old {};
    g_installed[i] = false;
    if (::sigaction(kFatalSignals[i], nullptr, &old) != 0) continue;
    if ((old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_DFL) {
      ::sigaction(kFatalSignals[i], &sa, nullptr);
      g_installed[i] = true;
    }
  }
}

void RemoveHandlers() {  // under g_tmp_mutex
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int i = 0; i < kNumFatal; ++i) {
    if (!g_installed[i]) continue;
    struct sigaction cur {};
    // Put back the default only where our handler is still the one installed.
    if (::sigaction(kFatalSignals[i], nullptr, &cur) == 0 && cur.sa_handler == RemoveTmpsOnSignal)
      ::sigaction(kFatalSignals[i], &dfl, nullptr);
    g_installed[i] = false;
  }
}

TmpNode* RegisterTmp(const std::string& path) {
  const std::lock_guard<std::mutex> lock(g_tmp_mutex);
  TmpNode* node = nullptr;
  for (TmpNode* n = g_tmp_head.load(); n != nullptr; n = n->next.load())
    if (!n->live.load()) {
      node = n;
      break;
    }
  if (node == nullptr) {
    node = new TmpNode;
    node->next.store(g_tmp_head.load());
    g_tmp_head.store(node, std::memory_order_release);
  }
  if (node->cap < path.size() + 1) {
    char* old = node->path;
    node->path = new char[path.size() + 1];
    node->cap = path.size() + 1;
    delete[] old;  // not live, so no handler reads it
  }
  std::memcpy(node->path, path.c_str(), path.size() + 1);
  if (g_live++ == 0) InstallHandlers();
  node->live.store(true, std::memory_order_release);
  return node;
}

// Stops tracking a temporary (renamed or removed by the caller). A handler that already took it is fine:
// the path is gone either way.
void ReleaseTmp(TmpNode* node) {
  const std::lock_guard<std::mutex> lock(g_tmp_mutex);
  node->live.store(false);
  if (--g_live == 0) RemoveHandlers();
}

// ---- Temporary names -------------------------------------------------------------------------------

// "<name>.tmp.<pid>.<12 hex>": unpredictable (a symlink planted at the next pid's name cannot be reached) and
// created with O_EXCL | O_NOFOLLOW; the pid tells a user, and the next run, whose temporary it is.
constexpr const char* kTmpTag = ".tmp.";

std::string RandomHex12() {
  uint64_t r = 0;
  if (::getrandom(&r, sizeof r, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof r)) {
    static std::atomic<uint64_t> counter{0};
    r = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9E3779B97F4A7C15ull ^
        (counter.fetch_add(1) << 32) ^ static_cast<uint64_t>(::getpid());
  }
  char buf[16];
  std::snprintf(buf, sizeof buf, "%012llx", static_cast<unsigned long long>(r & 0xFFFFFFFFFFFFull));
  return buf;
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// Removes the temporaries "<name>.tmp.<pid>.<12 hex>" in `path`'s directory whose process no longer runs (a
// run killed by SIGKILL, or by a power cut): once per directory and process, before its first write there.
void RemoveStaleTmps(const std::string& path) {
  static std::mutex mutex;
  static std::set<std::string> scanned;
  const std::string dir = DirOf(path);
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (!scanned.insert(dir).second) return;
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const size_t tag = name.rfind(kTmpTag);
    if (tag == std::string::npos || tag == 0) continue;
    const std::string rest = name.substr(tag + std::strlen(kTmpTag));  // "<pid>.<12 hex>"
    const size_t dot = rest.find('.');
    if (dot == std::string::npos || dot == 0 || dot > 10 || rest.size() != dot + 13) continue;
    if (rest.find_first_not_of("0123456789") != dot || rest.find_first_not_of("0123456789abcdef", dot + 1) != std::string::npos)
      continue;
    const long pid = std::stol(rest.substr(0, dot));
    if (pid <= 0 || pid == static_cast<long>(::getpid())) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    const std::string full = dir + "/" + name;
    struct stat st {};
    if (::lstat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode)) ::unlink(full.c_str());
  }
  ::closedir(d);
}

// ---- Writing ----------------------------------------------------------------------------------------

// Writes all of [data, data+size) to fd, retrying short writes and EINTR.
bool WriteAll(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

enum class Target { kAbsent, kRegular, kStream };

// What `path` names now. Character devices and FIFOs (/dev/null, /dev/stdout, a shell's <(...)) are written
// through; a directory, a block device or a socket is refused.
Target TargetOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Target::kAbsent;  // a dangling symlink is replaced like a file
  if (S_ISREG(st.st_mode)) return Target::kRegular;
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return Target::kStream;
  if (S_ISDIR(st.st_mode)) throw IoError("cannot write '" + path + "': it is a directory");
  throw IoError("cannot write '" + path + "': it is a " + (S_ISBLK(st.st_mode) ? "block device" : "socket") +
                ", not a regular file, a character device or a FIFO");
}

void WriteThrough(const std::string& path, const uint8_t* data, size_t size) {
  // O_NONBLOCK: a FIFO without a reader fails at once (ENXIO) instead of blocking forever.
  const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw IoError("cannot write '" + path + "': " + (err == ENXIO ? std::string("a FIFO with no reader") : ErrnoText(err)));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (!WriteAll(fd, data, size)) {
    const int err = errno;
    ::close(fd);
    throw IoError("cannot write '" + path + "': " + ErrnoText(err));
  }
  if (::close(fd) != 0 && errno != EINTR) throw IoError("cannot write '" + path + "': close failed: " + ErrnoText(errno));
}

// Why a temporary in `path`'s directory cannot be created, in words: a missing directory is named.
std::string CreateFailure(const std::string& path, const std::string& tmp, int err) {
  if (err == ENOENT) return "cannot write '" + path + "': the directory '" + DirOf(path) + "' does not exist";
  return "cannot write '" + path + "': cannot create '" + tmp + "': " + ErrnoText(err);
}

// A temporary beside `path` holding the bytes, fsynced and closed; registered for removal on a signal.
struct Tmp {
  std::string path, tmp;
  TmpNode* node = nullptr;
};

Tmp WriteTmp(const std::string& path, const uint8_t* data, size_t size) {
  RemoveStaleTmps(path);
  Tmp t;
  t.path = path;
  int fd = -1;
  for (int attempt = 0; attempt < 64 && fd < 0; ++attempt) {
    t.tmp = path + kTmpTag + std::to_string(static_cast<long>(::getpid())) + "." + RandomHex12();
    // Registered before it exists: a signal between the open and the registration would otherwise leave the
    // file behind. A signal before the open unlinks a name that does not exist yet, which is harmless; the
    // random part makes the name one that no other file has.
    t.node = RegisterTmp(t.tmp);
    fd = ::open(t.tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0) break;
    const int err = errno;
    ReleaseTmp(t.node);
    t.node = nullptr;
    if (err != EEXIST || attempt == 63) throw IoError(CreateFailure(path, t.tmp, err));
  }
  auto fail = [&](const std::string& step, int err) {
    ::unlink(t.tmp.c_str());
    ReleaseTmp(t.node);
    throw IoError("cannot write '" + path + "': " + step + ": " + ErrnoText(err));
  };
  if (!WriteAll(fd, data, size)) {
    const int err = errno;
    ::close(fd);
    fail("write to '" + t.tmp + "' failed", err);
  }
  // fsync before rename: otherwise a crash can leave the new name pointing at an empty or partial file on
  // some filesystems.
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("fsync of '" + t.tmp + "' failed", err);
  }
  if (::close(fd) != 0) fail("close of '" + t.tmp + "' failed", errno);
  return t;
}

void Discard(Tmp& t) {
  if (t.node == nullptr) return;
  ::unlink(t.tmp.c_str());
  ReleaseTmp(t.node);
  t.node = nullptr;
}

// Best effort: persist the rename itself. The data is already safe and the file is in place, so a failure
// here is not worth reporting.
void SyncDir(const std::string& path) {
  const int dir_fd = ::open(DirOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    (void)::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void Publish(Tmp& t) {
  if (std::rename(t.tmp.c_str(), t.path.c_str()) != 0) {
    const int err = errno;
    Discard(t);
    throw IoError("cannot write '" + t.path + "': rename of its temporary failed: " + ErrnoText(err));
  }
  ReleaseTmp(t.node);
  t.node = nullptr;
}

void WriteBytesAtomicImpl(const std::string& path, const uint8_t* data, size_t size) {
  if (path.empty()) throw IoError("cannot write an output with an empty name");
  if (TargetOf(path) == Target::kStream) return WriteThrough(path, data, size);
  Tmp t = WriteTmp(path, data, size);
  Publish(t);
  SyncDir(path);
}

}  // namespace

void WriteFileAtomic(const std::string& path, const std::string& contents) {
  WriteBytesAtomicImpl(path, reinterpret_cast<const uint8_t*>(contents.data()), contents.size());
}

void WriteBytesAtomic(const std::string& path, const uint8_t* data, size_t size) {
  WriteBytesAtomicImpl(path, data, size);
}

struct AtomicFileSet::Impl {
  std::vector<Tmp> tmps;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> streams;  // written through at Commit
  std::set<std::string> paths;
};

AtomicFileSet::AtomicFileSet() : impl_(std::make_unique<Impl>()) {}

AtomicFileSet::~AtomicFileSet() {
  for (Tmp& t : impl_->tmps) Discard(t);
}

void AtomicFileSet::Add(const std::string& path, const uint8_t* data, size_t size) {
  if (path.empty()) throw IoError("cannot write an output with an empty name");
  if (TargetOf(path) == Target::kStream) {
    impl_->streams.emplace_back(path, std::vector<uint8_t>(data, data + size));
    return;
  }
  if (!impl_->paths.insert(path).second) throw IoError("cannot write '" + path + "' twice in one output set");
  impl_->tmps.push_back(WriteTmp(path, data, size));
}

void AtomicFileSet::Add(const std::string& path, const std::string& contents) {
  Add(path, reinterpret_cast<const uint8_t*>(contents.data()), contents.size());
}

void AtomicFileSet::Commit() {
  // Every file is complete on disk before the first rename; a rename in the same directory fails only on a
  // concurrent change of that directory, and then the files not yet renamed are removed and the error names
  // what was already in place.
  std::vector<std::string> done;
  for (Tmp& t : impl_->tmps) {
    try {
      Publish(t);
    } catch (const IoError& e) {
      for (Tmp& rest : impl_->tmps) Discard(rest);
      throw IoError(std::string(e.what()) + (done.empty() ? "" : " (" + std::to_string(done.size()) + " of the set's " +
                                                                     std::to_string(impl_->tmps.size()) + " files were already written)"));
    }
    done.push_back(t.path);
  }
  std::set<std::string> dirs;
  for (const std::string& p : done) dirs.insert(DirOf(p) + "/x");
  for (const std::string& d : dirs) SyncDir(d);
  impl_->tmps.clear();
  for (const auto& [path, bytes] : impl_->streams) WriteThrough(path, bytes.data(), bytes.size());
  impl_->streams.clear();
}

std::string TensorFileName(const std::string& tensor_name) {
  if (tensor_name.empty()) throw IoError("a tensor with an empty name cannot be written as a file: write a .safetensors");
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < tensor_name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(tensor_name[i]);
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                      (c == '.' && i > 0);
    if (keep) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string TensorNameOfFile(const std::string& file_name) {
  auto hex = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < file_name.size(); ++i) {
    if (file_name[i] != '%') {
      out += file_name[i];
      continue;
    }
    if (i + 2 >= file_name.size() + 0 || hex(file_name[i + 1]) < 0 || hex(file_name[i + 2]) < 0)
      throw IoError("'" + file_name + "' is not a tensor file name: '%' must be followed by two upper-case hex digits");
    out += static_cast<char>(hex(file_name[i + 1]) * 16 + hex(file_name[i + 2]));
    i += 2;
  }
  if (out.empty() || TensorFileName(out) != file_name) throw IoError("'" + file_name + "' is not a tensor file name");
  return out;
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
