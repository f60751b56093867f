// outputs.h: the checks every command runs on its output paths before it computes anything: no output is
// one of its inputs, no two outputs are one file, and a directory's generated names fit the filesystem.
#pragma once

#include <string>
#include <vector>

namespace qmx::cli {

// An output path and the option (or description) that named it, for the message.
struct OutputPath {
  std::string option, path;
};

// Throws qmx::Error when an output is one of the inputs (a file, a FILE.safetensors:NAME, reached through a
// symlink or a hard link too) or when two outputs name one file (the same path spelled two ways, a symlink,
// a hard link). Empty paths are skipped; character devices and FIFOs (/dev/null, /dev/stdout) may repeat.
void CheckOutputs(const std::vector<OutputPath>& outputs, const std::vector<std::string>& inputs);

// Throws qmx::Error when a file name in `paths` (the last component) is longer than the filesystem's 255
// bytes, before any of them is written.
void CheckFileNameLengths(const std::vector<std::string>& paths);

}  // namespace qmx::cli
