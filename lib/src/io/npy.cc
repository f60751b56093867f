// npy.cc: NumPy .npy reader/writer (format 1.0/2.0/3.0); files are written through the atomic
// writer of atomic_file.cc and read through ReadRegularFile (limits.cc). Std only.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "qmx/error.h"
#include "qmx/io.h"

namespace qmx {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
// numpy aligns the start of the data to 64 bytes (ARRAY_ALIGN) so it can be
// memory-mapped with any element type.
constexpr size_t kArrayAlign = 64;
// numpy leaves room in the header so the leading axis can grow in place
// (GROWTH_AXIS_MAX_DIGITS); reproduced so our files are byte-identical.
constexpr size_t kGrowthAxisMaxDigits = 21;
// Bounds recursion on hostile headers such as "((((((...".
constexpr int kMaxNesting = 32;
constexpr const char* kSupportedDtypes =
    "qmx-sim reads little-endian <f4, <f8, <f2, |u1, <u2 and bf16 as |V2";

[[noreturn]] void Fail(const std::string& name, const std::string& what) {
  throw IoError(name + ": " + what);
}

// Quotes header text for an error message: non-printable bytes escaped and
// long text cut, so a binary file cannot flood the terminal.
std::string Printable(const std::string& text, size_t max_len = 80) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size() && i < max_len; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (text.size() > max_len) out += "...";
  return out;
}

// Python literal subset that appears in .npy headers.
struct PyValue {
  enum class Kind { kStr, kBool, kNone, kInt, kTuple, kList };
  Kind kind = Kind::kNone;
  std::string str;         // kStr: the decoded string
  bool boolean = false;    // kBool
  uint64_t integer = 0;    // kInt: magnitude
  bool negative = false;   // kInt
  bool too_big = false;    // kInt: magnitude does not fit in uint64_t
  std::vector<PyValue> items;  // kTuple, kList
  std::string source;      // the literal as written, for error messages
};

// Recursive-descent parser for the header dict. Every access is bounds-checked
// against text_, so arbitrary bytes yield an IoError, never a crash.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& name)
      : text_(text), name_(name) {}

  std::map<std::string, PyValue> ParseDict() {
    std::map<std::string, PyValue> dict;
    SkipSpace();
    if (AtEnd() || text_[pos_] != '{') Malformed("expected '{'");
    ++pos_;
    while (true) {
      SkipSpace();
      if (AtEnd()) Malformed("unterminated dict");
      if (text_[pos_] == '}') {
        ++pos_;
        break;
      }
      PyValue key = ParseValue(0);
      if (key.kind != PyValue::Kind::kStr) Malformed("dict key must be a string");
      SkipSpace();
      if (AtEnd() || text_[pos_] != ':') Malformed("expected ':'");
      ++pos_;
      current_key_ = key.str;
      PyValue value = ParseValue(0);
      current_key_.clear();
      if (!dict.emplace(key.str, std::move(value)).second) {
        Malformed("duplicate key '" + Printable(key.str) + "'");
      }
      SkipSpace();
      if (AtEnd()) Malformed("unterminated dict");
      if (text_[pos_] == ',') {
        ++pos_;
      } else if (text_[pos_] == '}') {
        ++pos_;
        break;
      } else {
        Malformed("expected ',' or '}'");
      }
    }
    SkipSpace();
    if (!AtEnd()) Malformed("unexpected text after the dict");
    return dict;
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }

  void SkipSpace() {
    while (!AtEnd() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                        text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  static bool IsIdentChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_';
  }

  [[noreturn]] void Malformed(const std::string& what) const {
    // Shape errors get their own wording: it is the field users most often
    // produce by hand, and the one a reader of the message looks for.
    std::string where = " at offset " + std::to_string(pos_) + " in header '" +
                        Printable(text_) + "'";
    if (current_key_ == "shape") Fail(name_, "unparsable shape: " + what + where);
    if (!current_key_.empty()) {
      Fail(name_, "malformed header: " + what + " in value of '" + Printable(current_key_) +
                      "'" + where);
    }
    Fail(name_, "malformed header: " + what + where);
  }

  PyValue ParseValue(int depth) {
    if (depth > kMaxNesting) Malformed("nesting too deep");
    SkipSpace();
    if (AtEnd()) Malformed("unexpected end of header");
    size_t start = pos_;
    PyValue value;
    char c = text_[pos_];
    if (c == '\'' || c == '"') {
      value = ParseString();
    } else if ((c == 'u' || c == 'U' || c == 'b' || c == 'B') && pos_ + 1 < text_.size() &&
               (text_[pos_ + 1] == '\'' || text_[pos_ + 1] == '"')) {
      ++pos_;  // Python 2 / bytes prefix; the content is what matters.
      value = ParseString();
    } else if (c == '(' || c == '[') {
      value = ParseSequence(depth);
    } else if ((c >= '0' && c <= '9') || c == '-' || c == '+') {
      value = ParseInt();
    } else if (IsIdentChar(c)) {
      std::string word;
      while (!AtEnd() && IsIdentChar(text_[pos_])) word += text_[pos_++];
      if (word == "True" || word == "False") {
        value.kind = PyValue::Kind::kBool;
        value.boolean = word == "True";
      } else if (word == "None") {
        value.kind = PyValue::Kind::kNone;
      } else {
        pos_ = start;
        Malformed("unexpected '" + Printable(word) + "'");
      }
    } else {
      Malformed("unexpected character '" + Printable(std::string(1, c)) + "'");
    }
    value.source = text_.substr(start, pos_ - start);
    return value;
  }

  PyValue ParseString() {
    char quote = text_[pos_++];
    PyValue value;
    value.kind = PyValue::Kind::kStr;
    while (true) {
      if (AtEnd() || text_[pos_] == '\n') Malformed("unterminated string");
      char c = text_[pos_];
      if (c == quote) {
        ++pos_;
        break;
      }
      if (c == '\\') {
        // Escapes never occur in real descr strings; keeping the escaped
        // character verbatim is enough to skip over them correctly.
        if (pos_ + 1 >= text_.size()) Malformed("unterminated string");
        value.str += text_[pos_ + 1];
        pos_ += 2;
        continue;
      }
      value.str += c;
      ++pos_;
    }
    return value;
  }

  PyValue ParseSequence(int depth) {
    char open = text_[pos_++];
    char close = open == '(' ? ')' : ']';
    PyValue value;
    value.kind = open == '(' ? PyValue::Kind::kTuple : PyValue::Kind::kList;
    bool had_comma = false;
    while (true) {
      SkipSpace();
      if (AtEnd()) Malformed(std::string("missing '") + close + "'");
      if (text_[pos_] == close) {
        ++pos_;
        break;
      }
      value.items.push_back(ParseValue(depth + 1));
      SkipSpace();
      if (AtEnd()) Malformed(std::string("missing '") + close + "'");
      if (text_[pos_] == ',') {
        had_comma = true;
        ++pos_;
      } else if (text_[pos_] == close) {
        ++pos_;
        break;
      } else {
        Malformed(std::string("expected ',' or '") + close + "'");
      }
    }
    // In Python "(5)" is the int 5, not a tuple; mirror that so "shape: (5)"
    // is rejected exactly as numpy rejects it.
    if (open == '(' && value.items.size() == 1 && !had_comma) {
      PyValue inner = std::move(value.items[0]);
      return inner;
    }
    return value;
  }

  PyValue ParseInt() {
    PyValue value;
    value.kind = PyValue::Kind::kInt;
    if (text_[pos_] == '-' || text_[pos_] == '+') value.negative = text_[pos_++] == '-';
    if (AtEnd() || text_[pos_] < '0' || text_[pos_] > '9') Malformed("expected digits");
    while (!AtEnd() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      uint64_t digit = static_cast<uint64_t>(text_[pos_] - '0');
      if (value.integer > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
        value.too_big = true;
      } else {
        value.integer = value.integer * 10 + digit;
      }
      ++pos_;
    }
    // Python 2 era files may write long integers as "3L".
    if (!AtEnd() && (text_[pos_] == 'L' || text_[pos_] == 'l')) ++pos_;
    if (!AtEnd() && IsIdentChar(text_[pos_])) Malformed("bad integer literal");
    return value;
  }

  const std::string& text_;
  const std::string& name_;
  size_t pos_ = 0;
  std::string current_key_;
};

bool DescrToDType(const std::string& descr, DType* dtype) {
  static const std::pair<const char*, DType> kTable[] = {
      {"<f4", DType::kF32},  {"<f8", DType::kF64},       {"<f2", DType::kF16},
      {"|u1", DType::kU8},   {"<u1", DType::kU8},        {"<u2", DType::kU16},
      {"|V2", DType::kBF16}, {"<V2", DType::kBF16},      {"bfloat16", DType::kBF16},
  };
  for (const auto& entry : kTable) {
    if (descr == entry.first) {
      *dtype = entry.second;
      return true;
    }
  }
  return false;
}

const char* DTypeToDescr(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "<f4";
    case DType::kF64: return "<f8";
    case DType::kF16: return "<f2";
    case DType::kBF16: return "|V2";  // numpy's own spelling of a 2-byte void
    case DType::kU8: return "|u1";
    case DType::kU16: return "<u2";
  }
  return nullptr;
}

// Python repr of a shape tuple: "()", "(5,)", "(2, 3, 4)".
std::string ShapeRepr(const std::vector<size_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  out += ")";
  return out;
}

// count * itemsize with overflow detection. A zero dimension makes the array
// empty whatever the other dimensions are, as in numpy.
bool CheckedByteCount(const std::vector<size_t>& shape, size_t itemsize, size_t* bytes) {
  constexpr size_t kMax = std::numeric_limits<size_t>::max();
  for (size_t dim : shape) {
    if (dim == 0) {
      *bytes = 0;
      return true;
    }
  }
  size_t total = itemsize;
  for (size_t dim : shape) {
    if (total != 0 && dim > kMax / total) return false;
    total *= dim;
  }
  *bytes = total;
  return true;
}

std::vector<uint8_t> SerializeNamed(const NpyArray& array, const std::string& name) {
  const char* descr = DTypeToDescr(array.dtype);
  if (descr == nullptr) {
    Fail(name, "invalid dtype value " + std::to_string(static_cast<int>(array.dtype)));
  }
  size_t expected = 0;
  if (!CheckedByteCount(array.shape, DTypeSize(array.dtype), &expected)) {
    Fail(name, "shape " + ShapeRepr(array.shape) + " is too large: byte count overflows");
  }
  if (array.data.size() != expected) {
    Fail(name, "data has " + std::to_string(array.data.size()) + " bytes but shape " +
                   ShapeRepr(array.shape) + " of " + DTypeName(array.dtype) + " needs " +
                   std::to_string(expected));
  }

  // Same text and key order numpy.lib.format emits (keys sorted, trailing ", ").
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': " + ShapeRepr(array.shape) +
                       ", }";
  if (!array.shape.empty()) {
    size_t digits = std::to_string(array.shape[0]).size();
    if (digits < kGrowthAxisMaxDigits) header.append(kGrowthAxisMaxDigits - digits, ' ');
  }
  // numpy always pads (between 1 and 64 spaces) and ends with '\n'.
  const size_t hlen = header.size() + 1;
  uint8_t major = 1;
  size_t len_bytes = 2;
  size_t padlen = kArrayAlign - (kMagicLen + 2 + len_bytes + hlen) % kArrayAlign;
  if (hlen + padlen > 0xffff) {
    major = 2;
    len_bytes = 4;
    padlen = kArrayAlign - (kMagicLen + 2 + len_bytes + hlen) % kArrayAlign;
    if (hlen + padlen > 0xffffffffULL) Fail(name, "header too long for the .npy format");
  }

  // The preamble is assembled as text first (GCC 12 misreads inserts into a reserved vector as
  // overflows), then copied with the data into one buffer.
  std::string pre(kMagic, kMagicLen);
  pre.push_back(static_cast<char>(major));
  pre.push_back(0);
  const uint64_t hdr_len = hlen + padlen;
  for (size_t i = 0; i < len_bytes; ++i) pre.push_back(static_cast<char>(hdr_len >> (8 * i)));
  pre += header;
  pre.append(padlen, ' ');
  pre.push_back('\n');
  std::vector<uint8_t> out(pre.size() + array.data.size());
  std::memcpy(out.data(), pre.data(), pre.size());
  if (!array.data.empty()) std::memcpy(out.data() + pre.size(), array.data.data(), array.data.size());
  return out;
}

}  // namespace

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kU8: return "u8";
    case DType::kU16: return "u16";
  }
  return "invalid";
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kU8: return 1;
    case DType::kU16: return 2;
  }
  return 0;
}

size_t NpyArray::count() const {
  size_t n = 1;
  for (size_t dim : shape) n *= dim;
  return n;
}

NpyArray ParseNpy(const std::vector<uint8_t>& bytes, const std::string& name) {
  const size_t size = bytes.size();
  if (size == 0 || std::memcmp(bytes.data(), kMagic, std::min(size, kMagicLen)) != 0) {
    Fail(name, "not a .npy file (bad magic; expected \\x93NUMPY)");
  }
  if (size < kMagicLen + 2) {
    Fail(name, "truncated header: file is only " + std::to_string(size) + " bytes");
  }
  const unsigned major = bytes[6];
  const unsigned minor = bytes[7];
  if (major < 1 || major > 3 || minor != 0) {
    Fail(name, "unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " (qmx-sim reads 1.0, 2.0 and 3.0)");
  }
  const size_t len_bytes = major == 1 ? 2 : 4;
  const size_t len_offset = kMagicLen + 2;
  if (size < len_offset + len_bytes) {
    Fail(name, "truncated header: file is only " + std::to_string(size) + " bytes");
  }
  uint64_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) {
    header_len |= static_cast<uint64_t>(bytes[len_offset + i]) << (8 * i);
  }
  const size_t header_start = len_offset + len_bytes;
  if (header_len > size - header_start) {
    Fail(name, "truncated header: header length " + std::to_string(header_len) +
                   " extends beyond end of file (file is " + std::to_string(size) + " bytes)");
  }
  const size_t data_start = header_start + static_cast<size_t>(header_len);
  const std::string header(reinterpret_cast<const char*>(bytes.data() + header_start),
                           static_cast<size_t>(header_len));

  std::map<std::string, PyValue> dict = HeaderParser(header, name).ParseDict();
  for (const auto& entry : dict) {
    if (entry.first != "descr" && entry.first != "fortran_order" && entry.first != "shape") {
      Fail(name, "unexpected key '" + Printable(entry.first) +
                     "' in header (expected 'descr', 'fortran_order', 'shape')");
    }
  }
  for (const char* key : {"descr", "fortran_order", "shape"}) {
    if (dict.count(key) == 0) {
      Fail(name, std::string("header is missing key '") + key + "' (header: '" +
                     Printable(header) + "')");
    }
  }

  NpyArray array;
  const PyValue& descr = dict["descr"];
  if (descr.kind != PyValue::Kind::kStr) {
    Fail(name, "unsupported dtype " + Printable(descr.source) +
                   " (structured dtypes are not supported; " + kSupportedDtypes + ")");
  }
  if (!DescrToDType(descr.str, &array.dtype)) {
    Fail(name, "unsupported dtype '" + Printable(descr.str) + "' (" + kSupportedDtypes + ")");
  }

  const PyValue& fortran = dict["fortran_order"];
  if (fortran.kind != PyValue::Kind::kBool) {
    Fail(name, "malformed header: fortran_order must be True or False, got " +
                   Printable(fortran.source));
  }
  if (fortran.boolean) {
    Fail(name, "fortran_order=True is not supported; save the array in C order "
               "(e.g. np.ascontiguousarray)");
  }

  const PyValue& shape = dict["shape"];
  if (shape.kind != PyValue::Kind::kTuple) {
    Fail(name, "unparsable shape " + Printable(shape.source) +
                   ": expected a tuple of non-negative integers");
  }
  for (const PyValue& dim : shape.items) {
    if (dim.kind != PyValue::Kind::kInt) {
      Fail(name, "unparsable shape " + Printable(shape.source) + ": dimension " +
                     Printable(dim.source) + " is not an integer");
    }
    if (dim.negative && (dim.integer != 0 || dim.too_big)) {
      Fail(name, "unparsable shape " + Printable(shape.source) + ": negative dimension");
    }
    if (dim.too_big || dim.integer > std::numeric_limits<size_t>::max()) {
      Fail(name, "shape " + Printable(shape.source) + " is too large: dimension overflows");
    }
    array.shape.push_back(static_cast<size_t>(dim.integer));
  }

  size_t expected = 0;
  if (!CheckedByteCount(array.shape, DTypeSize(array.dtype), &expected)) {
    Fail(name, "shape " + Printable(shape.source) +
                   " is too large: element count overflows");
  }
  const size_t found = size - data_start;
  if (found < expected) {
    Fail(name, "truncated: expected " + std::to_string(expected) + " bytes of data, found " +
                   std::to_string(found));
  }
  if (found > expected) {
    Fail(name, "trailing garbage: expected " + std::to_string(expected) +
                   " bytes of data, found " + std::to_string(found) + " (" +
                   std::to_string(found - expected) + " extra bytes after the array)");
  }
  array.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(data_start), bytes.end());
  return array;
}

NpyArray ReadNpy(const std::string& path) {
  // The file is held twice (its bytes, then the array), so both copies must fit under the ceiling.
  return ParseNpy(ReadRegularFile(path, 2), path);
}

std::vector<uint8_t> SerializeNpy(const NpyArray& array) {
  return SerializeNamed(array, "SerializeNpy");
}

void WriteNpy(const std::string& path, const NpyArray& array) {
  std::vector<uint8_t> bytes = SerializeNamed(array, path);
  WriteBytesAtomic(path, bytes.data(), bytes.size());
}

}  // namespace qmx
