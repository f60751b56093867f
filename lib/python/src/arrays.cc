// arrays.cc: NumPy arrays in and out of the bindings (arrays.h).
#include "arrays.h"

namespace qmx::py {

namespace {

InArray Wrap(const pyb::array& a, DType t, const char* what) {
  if (!(a.flags() & pyb::array::c_style))
    throw pyb::type_error(std::string(what) + " must be C-contiguous (qmx reads arrays in place and does not copy "
                          "them; pass numpy.ascontiguousarray(x) to copy)");
  InArray in;
  in.dtype = t;
  in.data = a.data();
  in.count = static_cast<size_t>(a.size());
  for (pyb::ssize_t i = 0; i < a.ndim(); ++i) in.shape.push_back(static_cast<size_t>(a.shape(i)));
  return in;
}

std::string DtypeText(const pyb::array& a) { return pyb::str(a.dtype()).cast<std::string>(); }

}  // namespace

bool IsTwoByteDtype(const std::string& name) {
  return name == "float16" || name == "bfloat16" || name == "uint16" || name == "int16" || name == "|V2";
}

InArray FloatInput(const pyb::array& a, const std::string& src, const char* what) {
  const pyb::dtype dt = a.dtype();
  const std::string name = DtypeText(a);
  if (!src.empty() && src != "fp32" && src != "fp16" && src != "bf16")
    throw pyb::value_error("src must be fp32, fp16 or bf16, not '" + src + "'");
  if (dt.is(pyb::dtype::of<float>())) {
    if (!src.empty() && src != "fp32") throw pyb::type_error(std::string(what) + " is float32 but src is " + src);
    return Wrap(a, DType::kF32, what);
  }
  if (IsTwoByteDtype(name)) {
    if (name == "bfloat16") {  // ml_dtypes.bfloat16
      if (!src.empty() && src != "bf16") throw pyb::type_error(std::string(what) + " is bfloat16 but src is " + src);
      return Wrap(a, DType::kBF16, what);
    }
    if (name == "float16") {
      if (src == "bf16") throw pyb::type_error(std::string(what) + " is float16 but src is bf16");
      return Wrap(a, DType::kF16, what);
    }
    if (src == "bf16") return Wrap(a, DType::kBF16, what);
    if (src == "fp16") return Wrap(a, DType::kF16, what);
    throw pyb::type_error(std::string(what) + " is " + name +
                          ": say which 2-byte format its bits are with src='bf16' or src='fp16'");
  }
  throw pyb::type_error(std::string(what) + " has dtype " + name +
                        "; qmx reads float32, float16 and bfloat16 (uint16 bits with src='bf16') in place "
                        "(convert it first, e.g. x.astype(numpy.float32))");
}

InArray CodesInput(const pyb::array& a, const char* what) {
  if (!a.dtype().is(pyb::dtype::of<uint8_t>()))
    throw pyb::type_error(std::string(what) + " must be uint8 codes, not " + DtypeText(a));
  return Wrap(a, DType::kU8, what);
}

InArray F32Input(const pyb::array& a, const char* what) {
  if (!a.dtype().is(pyb::dtype::of<float>()))
    throw pyb::type_error(std::string(what) + " must be float32, not " + DtypeText(a));
  return Wrap(a, DType::kF32, what);
}

void RowsCols(const std::vector<size_t>& shape, size_t& rows, size_t& cols) {
  size_t count = 1;
  for (size_t d : shape) count *= d;
  cols = shape.empty() ? 1 : shape.back();
  rows = cols == 0 ? 0 : count / cols;
}

}  // namespace qmx::py
