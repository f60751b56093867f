// outputs.cc: output-path checks shared by every command (outputs.h).
#include "common/outputs.h"

#include <sys/stat.h>

#include <filesystem>
#include <map>

#include "qmx/error.h"

namespace qmx::cli {
namespace {

// FILE.safetensors:NAME names a tensor of FILE.
std::string FileOf(const std::string& input) {
  const size_t st = input.find(".safetensors:");
  return st == std::string::npos ? input : input.substr(0, st + std::string(".safetensors").size());
}

// A stream (character device or FIFO) is written through, not replaced: two outputs may share one.
bool IsStream(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode));
}

// The file a path will name: symlinks in its existing part resolved, "." and ".." folded.
std::string Identity(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(path, ec).lexically_normal();
  const std::filesystem::path p = std::filesystem::weakly_canonical(abs, ec);
  return ec ? abs.string() : p.string();
}

bool SameExistingFile(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec) && std::filesystem::equivalent(a, b, ec);
}

}  // namespace

void CheckOutputs(const std::vector<OutputPath>& outputs, const std::vector<std::string>& inputs) {
  std::map<std::string, const OutputPath*> by_path;
  std::map<std::pair<dev_t, ino_t>, const OutputPath*> by_inode;  // existing files: hard links and symlinks
  for (const OutputPath& o : outputs) {
    if (o.path.empty() || IsStream(o.path)) continue;
    for (const std::string& in : inputs) {
      if (in.empty()) continue;
      const std::string file = FileOf(in);
      if (SameExistingFile(o.path, file) || Identity(o.path) == Identity(file))
        throw Error(o.option + " '" + o.path + "' is the input file '" + file + "': write the result elsewhere");
    }
    const OutputPath* other = nullptr;
    const auto [it, fresh] = by_path.emplace(Identity(o.path), &o);
    if (!fresh) other = it->second;
    struct stat st {};
    if (other == nullptr && ::stat(o.path.c_str(), &st) == 0) {
      const auto [jt, new_inode] = by_inode.emplace(std::make_pair(st.st_dev, st.st_ino), &o);
      if (!new_inode) other = jt->second;
    }
    if (other != nullptr)
      throw Error(other->option + " '" + other->path + "' and " + o.option + " '" + o.path +
                  "' are one file: give each output its own path");
  }
}

void CheckFileNameLengths(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    const std::string name = std::filesystem::path(p).filename().string();
    if (name.size() > 255)
      throw Error("the output file name '" + name.substr(0, 60) + "...' is " + std::to_string(name.size()) +
                  " bytes, more than a file name may have (255): write a .safetensors instead");
  }
}

}  // namespace qmx::cli
