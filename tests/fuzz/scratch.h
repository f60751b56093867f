// scratch.h: the file side of the golden fuzz targets (fuzz_golden, fuzz_manifest): a private directory made
// once per process, and whole-file writes that abort the run when they fail (a full /tmp is not a finding).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace qmx::fuzz {

inline void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) std::abort();
}

// A new directory /tmp/PREFIX-XXXXXX with the subdirectory `sub` (relative) inside it.
inline std::string MakeScratchDir(const std::string& prefix, const std::string& sub) {
  std::string t = "/tmp/" + prefix + "-XXXXXX";
  if (!mkdtemp(t.data())) std::abort();
  std::filesystem::create_directories(std::filesystem::path(t) / sub);
  return t;
}

}  // namespace qmx::fuzz
