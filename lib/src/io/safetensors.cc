// safetensors.cc: .safetensors reader and writer (format of huggingface/safetensors: u64 LE header
// length N, N bytes of JSON header, then the data section the header's offsets index).
#include "qmx/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "qmx/error.h"
#include "qmx/quantize.h"

namespace qmx {
namespace {

// The reference implementation refuses headers above 100 MB.
constexpr uint64_t kMaxHeader = 100'000'000;

struct DtypeInfo {
  const char* name;
  int bits;             // bits per element
  bool supported;       // readable (a value or a code dtype)
  DType dtype;          // what Read returns
  const Format* codes;  // code dtypes: the element format; nullptr for value dtypes
};
constexpr DtypeInfo kDtypes[] = {
    {"F32", 32, true, DType::kF32, nullptr},
    {"F64", 64, true, DType::kF64, nullptr},
    {"F16", 16, true, DType::kF16, nullptr},
    {"BF16", 16, true, DType::kBF16, nullptr},
    {"U8", 8, true, DType::kU8, nullptr},
    {"U16", 16, true, DType::kU16, nullptr},
    {"F8_E4M3", 8, true, DType::kU8, &fmt::kE4M3},
    {"F8_E5M2", 8, true, DType::kU8, &fmt::kE5M2},
    {"F8_E8M0", 8, true, DType::kU8, &fmt::kUE8M0},
    {"F6_E2M3", 6, true, DType::kU8, &fmt::kE2M3},
    {"F6_E3M2", 6, true, DType::kU8, &fmt::kE3M2},
    {"F4", 4, true, DType::kU8, &fmt::kE2M1},
    {"I8", 8, true, DType::kU8, &fmt::kInt8},
    {"BOOL", 8, false, DType::kU8, nullptr},
    {"I16", 16, false, DType::kU8, nullptr},
    {"I32", 32, false, DType::kU8, nullptr},
    {"U32", 32, false, DType::kU8, nullptr},
    {"I64", 64, false, DType::kU8, nullptr},
    {"U64", 64, false, DType::kU8, nullptr},
    {"F8_E4M3FNUZ", 8, true, DType::kU8, &fmt::kE4M3Fnuz},
    {"F8_E5M2FNUZ", 8, true, DType::kU8, &fmt::kE5M2Fnuz},
};

const DtypeInfo* FindDtype(const std::string& s) {
  for (const auto& d : kDtypes)
    if (s == d.name) return &d;
  return nullptr;
}

[[noreturn]] void Fail(const std::string& name, const std::string& what) { throw IoError(name + ": " + what); }

std::string Shown(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 60; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) out += static_cast<char>(c);
    else out += '?';
  }
  return s.size() > 60 ? out + "..." : out;
}

// product(shape) * bits / 8 with overflow detection; false on overflow or a partial byte.
bool TensorBytes(const std::vector<size_t>& shape, int bits, uint64_t* bytes) {
  unsigned __int128 total = 1;
  for (size_t d : shape) {
    total *= d;
    if (total > (static_cast<unsigned __int128>(1) << 64)) return false;
  }
  total *= static_cast<unsigned>(bits);
  if (total % 8 != 0) return false;
  total /= 8;
  if (total > std::numeric_limits<uint64_t>::max()) return false;
  *bytes = static_cast<uint64_t>(total);
  return true;
}

uint64_t ReadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string ErrnoText(int err) { return std::strerror(err); }

// A safetensors header nests three deep ({name: {shape: [...]}}); the check runs over the text before the
// JSON parser builds anything, so a header of millions of nested brackets is refused in one pass instead of
// costing gigabytes of parse tree. The tree of a flat header is bounded too: about 48 bytes per value
// against at least 2 bytes of text per value, checked against the memory ceiling.
void CheckHeaderShape(const std::string& text, const std::string& name) {
  constexpr int kMaxDepth = 4;
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth)
        Fail(name, "header nests deeper than " + std::to_string(kMaxDepth) + " levels at byte " + std::to_string(i) +
                       ": not a safetensors header");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  CheckMemoryCeiling(uint64_t{24} * text.size(), name + ": parsing the " + std::to_string(text.size()) + "-byte header");
}

}  // namespace

const SafetensorsTensor* SafetensorsIndex::Find(const std::string& name) const {
  if (by_name.size() == tensors.size() && !tensors.empty()) {
    const auto it = std::lower_bound(by_name.begin(), by_name.end(), name,
                                     [&](uint32_t i, const std::string& n) { return tensors[i].name < n; });
    return it != by_name.end() && tensors[*it].name == name ? &tensors[*it] : nullptr;
  }
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const char* SafetensorsDtypeName(DType dtype) {
  for (const auto& d : kDtypes)
    if (d.supported && d.codes == nullptr && d.dtype == dtype) return d.name;
  return "?";
}

const char* SafetensorsCodeDtype(const Format& f) {
  for (const auto& d : kDtypes)
    if (d.codes != nullptr && *d.codes == f) return d.name;
  return nullptr;
}

size_t SafetensorsTensor::count() const {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  return n;
}

SafetensorsIndex ParseSafetensorsHeader(const uint8_t* header, size_t header_size, uint64_t file_size,
                                        const std::string& name) {
  if (header_size > kMaxHeader) Fail(name, "header of " + std::to_string(header_size) + " bytes exceeds 100 MB");
  if (file_size < 8 || header_size > file_size - 8)
    Fail(name, "header length " + std::to_string(header_size) + " runs past the end of the file (" +
                   std::to_string(file_size) + " bytes): truncated or not a safetensors file");
  const std::string text(reinterpret_cast<const char*>(header), header_size);
  if (text.empty() || text[0] != '{') Fail(name, "header does not start with '{': not a safetensors file");
  CheckHeaderShape(text, name);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) Fail(name, "header is not a valid JSON object");
  SafetensorsIndex index;
  index.data_start = 8 + header_size;
  const uint64_t data_size = file_size - index.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) Fail(name, "__metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) Fail(name, "__metadata__ value of '" + Shown(m.key()) + "' is not a string");
        index.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + Shown(key) + "'";
    if (!v.is_object()) Fail(name, where + " is not an object");
    SafetensorsTensor t;
    t.name = key;
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) Fail(name, where + " has no dtype string");
    t.dtype = dt->get<std::string>();
    const DtypeInfo* info = FindDtype(t.dtype);
    if (info == nullptr) Fail(name, where + " has unknown dtype '" + Shown(t.dtype) + "'");
    t.supported = info->supported;
    t.qmx_dtype = info->dtype;
    t.codes = info->codes != nullptr;
    if (t.codes) t.format = *info->codes;
    t.bits = info->bits;
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) Fail(name, where + " has no shape array");
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) Fail(name, where + " has a shape entry that is not a non-negative integer");
      t.shape.push_back(d.get<size_t>());
    }
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      Fail(name, where + " needs data_offsets [begin, end] of non-negative integers");
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    if (t.end < t.begin) Fail(name, where + " has data_offsets end < begin");
    uint64_t bytes = 0;
    if (!TensorBytes(t.shape, info->bits, &bytes)) Fail(name, where + ": shape is too large or not whole bytes");
    if (bytes != t.end - t.begin)
      Fail(name, where + " (" + t.dtype + ") needs " + std::to_string(bytes) + " bytes but data_offsets span " +
                     std::to_string(t.end - t.begin));
    index.tensors.push_back(std::move(t));
  }
  std::sort(index.tensors.begin(), index.tensors.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  index.by_name.resize(index.tensors.size());
  for (size_t i = 0; i < index.by_name.size(); ++i) index.by_name[i] = static_cast<uint32_t>(i);
  std::sort(index.by_name.begin(), index.by_name.end(),
            [&](uint32_t a, uint32_t b) { return index.tensors[a].name < index.tensors[b].name; });
  // The ranges must tile [0, data_size): no gap, no overlap, nothing left over.
  uint64_t pos = 0;
  for (const auto& t : index.tensors) {
    if (t.begin != pos)
      Fail(name, "tensor '" + Shown(t.name) + "' starts at byte " + std::to_string(t.begin) + " of the data, expected " +
                     std::to_string(pos) + " (gap or overlap)");
    pos = t.end;
  }
  if (pos != data_size)
    Fail(name, "tensors cover " + std::to_string(pos) + " bytes but the data section holds " + std::to_string(data_size) +
                   (pos > data_size ? " (truncated file)" : " (trailing bytes)"));
  return index;
}

SafetensorsIndex ParseSafetensors(const std::vector<uint8_t>& bytes, const std::string& name) {
  if (bytes.size() < 8) Fail(name, "file of " + std::to_string(bytes.size()) + " bytes is too short for a safetensors header");
  const uint64_t n = ReadLe64(bytes.data());
  if (n > kMaxHeader) Fail(name, "header length " + std::to_string(n) + " exceeds 100 MB");
  if (n > bytes.size() - 8)
    Fail(name, "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(bytes.size()) +
                   " bytes): truncated or not a safetensors file");
  return ParseSafetensorsHeader(bytes.data() + 8, static_cast<size_t>(n), bytes.size(), name);
}

namespace {

// One file's header, read and validated.
SafetensorsIndex ReadHeaderOf(const std::string& path) {
  std::FILE* f = OpenRegularFile(path);
  struct stat st {};
  if (::fstat(fileno(f), &st) != 0) {
    const int err = errno;
    std::fclose(f);
    throw IoError("cannot stat '" + path + "': " + ErrnoText(err));
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  uint8_t len[8];
  if (file_size < 8 || std::fread(len, 1, 8, f) != 8) {
    std::fclose(f);
    Fail(path, "file of " + std::to_string(file_size) + " bytes is too short for a safetensors header");
  }
  const uint64_t n = ReadLe64(len);
  if (n > kMaxHeader || n > file_size - 8) {
    std::fclose(f);
    Fail(path, "header length " + std::to_string(n) + " does not fit the file (" + std::to_string(file_size) +
                   " bytes): truncated or not a safetensors file");
  }
  std::vector<uint8_t> header(static_cast<size_t>(n));
  const size_t got = n == 0 ? 0 : std::fread(header.data(), 1, header.size(), f);
  std::fclose(f);
  if (got != header.size()) Fail(path, "could not read the header");
  return ParseSafetensorsHeader(header.data(), header.size(), file_size, path);
}


bool EndsWithText(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool SafetensorsReader::IsSharded(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) || EndsWithText(path, ".index.json");
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  namespace fs = std::filesystem;
  if (!IsSharded(path)) {
    index_ = ReadHeaderOf(path);
    files_ = {path};
    data_starts_ = {index_.data_start};
    return;
  }
  // The shards: a directory's *.safetensors, or the files an index's weight_map names.
  std::vector<std::string> files;
  std::map<std::string, std::string> weight_map;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path))
      if (e.is_regular_file() && EndsWithText(e.path().filename().string(), ".safetensors")) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    if (files.empty()) throw IoError("'" + path + "' holds no .safetensors file");
  } else {
    const std::vector<uint8_t> bytes = ReadRegularFile(path);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(bytes.begin(), bytes.end());
      for (const auto& [name, file] : j.at("weight_map").items()) {
        const std::string f = file.get<std::string>();
        if (f.empty() || f[0] == '/' || f.find("..") != std::string::npos || f.find('/') != std::string::npos)
          throw IoError("'" + path + "': weight_map file '" + f + "' must be a file name beside the index");
        weight_map[name] = f;
      }
    } catch (const nlohmann::json::exception& e) {
      throw IoError("'" + path + "' is not a safetensors index (a JSON object with a weight_map): " + e.what());
    }
    std::set<std::string> names;
    for (const auto& [t, f] : weight_map) names.insert(f);
    const fs::path dir = fs::path(path).parent_path();
    for (const std::string& f : names) files.push_back((dir / f).string());
    if (files.empty()) throw IoError("'" + path + "': its weight_map names no file");
  }
  std::map<std::string, uint32_t> owner;
  for (uint32_t fi = 0; fi < files.size(); ++fi) {
    SafetensorsIndex one = ReadHeaderOf(files[fi]);
    files_.push_back(files[fi]);
    data_starts_.push_back(one.data_start);
    for (SafetensorsTensor& t : one.tensors) {
      if (const auto it = owner.find(t.name); it != owner.end())
        throw IoError("tensor '" + t.name + "' is in both '" + files[it->second] + "' and '" + files[fi] + "'");
      owner[t.name] = fi;
      t.file = fi;
      index_.tensors.push_back(std::move(t));
    }
    for (const auto& [k, v] : one.metadata) {
      const auto it = index_.metadata.find(k);
      if (it != index_.metadata.end() && it->second != v)
        throw IoError("metadata '" + k + "' differs between the shards of '" + path + "' ('" + files[fi] + "')");
      index_.metadata[k] = v;
    }
  }
  for (const auto& [t, f] : weight_map) {
    const auto it = owner.find(t);
    if (it == owner.end() || fs::path(files[it->second]).filename().string() != f)
      throw IoError("'" + path + "' maps tensor '" + t + "' to '" + f + "', which does not hold it");
  }
  index_.by_name.resize(index_.tensors.size());
  for (uint32_t i = 0; i < index_.by_name.size(); ++i) index_.by_name[i] = i;
  std::sort(index_.by_name.begin(), index_.by_name.end(),
            [&](uint32_t a, uint32_t b) { return index_.tensors[a].name < index_.tensors[b].name; });
}

const SafetensorsTensor& SafetensorsReader::Get(const std::string& name) const {
  const SafetensorsTensor* t = index_.Find(name);
  if (t != nullptr) return *t;
  std::string known;
  for (size_t i = 0; i < index_.tensors.size() && i < 5; ++i) known += (i ? ", " : "") + index_.tensors[i].name;
  if (index_.tensors.size() > 5) known += ", ... (" + std::to_string(index_.tensors.size()) + " tensors)";
  Fail(path_, "no tensor named '" + name + "'" + (known.empty() ? " (the file holds none)" : "; it holds " + known));
}

NpyArray SafetensorsReader::Read(const std::string& name) const {
  const SafetensorsTensor* t = &Get(name);
  if (!t->supported)
    Fail(path_, "tensor '" + name + "' has dtype " + t->dtype +
                    "; qmx-sim reads F32, F64, F16, BF16, U8, U16, I8 and the F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, F8_E8M0, F6_E2M3, "
                    "F6_E3M2 and F4 codes");
  const uint64_t stored = t->end - t->begin;
  // Sub-byte codes are unpacked to one byte each: the array is count() bytes.
  CheckMemoryCeiling(t->bits < 8 ? stored + t->count() : stored, "tensor '" + name + "' of '" + path_ + "'");
  std::vector<uint8_t> bytes(static_cast<size_t>(stored));
  const std::string& file = files_.at(t->file);
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (f == nullptr) throw IoError("cannot open '" + file + "': " + ErrnoText(errno));
  const bool ok = ::fseeko(f, static_cast<off_t>(data_starts_.at(t->file) + t->begin), SEEK_SET) == 0 &&
                  (bytes.empty() || std::fread(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
  if (!ok) Fail(path_, "could not read the bytes of tensor '" + name + "' (file changed or truncated?)");
  NpyArray a;
  a.dtype = t->qmx_dtype;
  a.shape = t->shape;
  a.data = t->bits < 8 ? UnpackCodes(bytes.data(), bytes.size(), t->count(), t->bits) : std::move(bytes);
  return a;
}

NpyArray SafetensorsReader::ReadValues(const std::string& name) const {
  const SafetensorsTensor& t = Get(name);
  if (!t.codes) {
    if (t.qmx_dtype == DType::kF32 || t.qmx_dtype == DType::kF16 || t.qmx_dtype == DType::kBF16) return Read(name);
    Fail(path_, "tensor '" + name + "' has dtype " + t.dtype + "; values are read from F32, F16, BF16 and the code dtypes");
  }
  CheckMemoryCeiling(uint64_t{5} * t.count(), "tensor '" + name + "' of '" + path_ + "' decoded to FP32");
  const NpyArray c = Read(name);
  NpyArray v;
  v.dtype = DType::kF32;
  v.shape = c.shape;
  v.data.resize(c.data.size() * 4);
  float* out = reinterpret_cast<float*>(v.data.data());
  if (t.format == fmt::kInt8) {
    for (size_t i = 0; i < c.data.size(); ++i) out[i] = static_cast<float>(static_cast<int8_t>(c.data[i]));
  } else {  // exact values by the format's table (the format layer alone: the fuzz targets link no more)
    const std::vector<float> table = DecodeTableF32(t.format);
    for (size_t i = 0; i < c.data.size(); ++i) out[i] = table[c.data[i] & t.format.CodeMask()];
  }
  return v;
}

namespace {

// A tensor to serialize, by reference (the pair and entry overloads share one writer without copying).
struct EntryRef {
  const std::string& name;
  const NpyArray& array;
  const std::string& dtype;
};

std::vector<uint8_t> Serialize(const std::vector<EntryRef>& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  std::vector<std::vector<uint8_t>> packed(tensors.size());  // sub-byte code tensors, packed
  uint64_t pos = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const std::string& name = tensors[k].name;
    const NpyArray& a = tensors[k].array;
    const std::string& dtype_name = tensors[k].dtype;
    if (name == "__metadata__" || !seen.insert(name).second)
      throw IoError("safetensors: tensor name '" + name + "' is reserved or repeated");
    const size_t count = a.count();
    const std::string dtype = dtype_name.empty() ? SafetensorsDtypeName(a.dtype) : dtype_name;
    const DtypeInfo* info = FindDtype(dtype);
    if (info == nullptr || !info->supported)
      throw IoError("safetensors: tensor '" + name + "': dtype '" + dtype + "' is not written");
    size_t bytes = count * DTypeSize(a.dtype);
    if (a.data.size() != bytes)
      throw IoError("safetensors: tensor '" + name + "' holds " + std::to_string(a.data.size()) + " bytes, its shape needs " +
                    std::to_string(bytes));
    if (info->codes != nullptr) {
      if (a.dtype != DType::kU8) throw IoError("safetensors: tensor '" + name + "': " + dtype + " is written from U8 codes");
      const uint8_t limit = info->bits == 8 ? 0 : static_cast<uint8_t>(1u << info->bits);
      for (size_t i = 0; limit != 0 && i < count; ++i)
        if (a.data[i] >= limit) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", a.data[i]);
          throw IoError("safetensors: tensor '" + name + "': code " + hex + " at element " + std::to_string(i) +
                        " does not fit " + dtype + "'s " + std::to_string(info->bits) + " bits");
        }
      if (info->bits < 8) {
        if (count * static_cast<size_t>(info->bits) % 8 != 0)
          throw IoError("safetensors: tensor '" + name + "': " + std::to_string(count) + " " + dtype + " elements are not whole bytes (" +
                        (info->bits == 4 ? "F4 needs an even count" : "F6 needs a multiple of 4") + ")");
        packed[k] = PackCodes(a.data.data(), count, info->bits);
        bytes = packed[k].size();
      }
    }
    header[name] = {{"dtype", dtype}, {"shape", a.shape}, {"data_offsets", {pos, pos + bytes}}};
    pos += bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  std::vector<uint8_t> out(8 + text.size() + pos);
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  std::memcpy(out.data() + 8, text.data(), text.size());
  size_t at = 8 + text.size();
  for (size_t k = 0; k < tensors.size(); ++k) {
    const std::vector<uint8_t>& src = packed[k].empty() ? tensors[k].array.data : packed[k];
    if (!src.empty()) std::memcpy(out.data() + at, src.data(), src.size());
    at += src.size();
  }
  return out;
}

const std::string kNoDtype;

}  // namespace

std::vector<uint8_t> SerializeSafetensorsTyped(const std::vector<SafetensorsEntry>& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  std::vector<EntryRef> refs;
  for (const auto& t : tensors) refs.push_back({t.name, t.array, t.dtype});
  return Serialize(refs, metadata);
}

std::vector<uint8_t> SerializeSafetensors(const std::vector<std::pair<std::string, NpyArray>>& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  std::vector<EntryRef> refs;
  for (const auto& [name, a] : tensors) refs.push_back({name, a, kNoDtype});
  return Serialize(refs, metadata);
}

void WriteSafetensorsTyped(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::vector<uint8_t> bytes = SerializeSafetensorsTyped(tensors, metadata);
  WriteBytesAtomic(path, bytes.data(), bytes.size());
}

void WriteSafetensors(const std::string& path, const std::vector<std::pair<std::string, NpyArray>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::vector<uint8_t> bytes = SerializeSafetensors(tensors, metadata);
  WriteBytesAtomic(path, bytes.data(), bytes.size());
}

}  // namespace qmx
