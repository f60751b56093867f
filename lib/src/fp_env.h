// fp_env.h (internal): the library's floating-point arithmetic assumes IEEE round to nearest even with
// subnormals kept (no flush-to-zero, no denormals-are-zero). A caller may have changed that (fesetround,
// -ffast-math's crtfastmath, a framework that sets FTZ). ScopedDefaultFpEnv sets the default modes on the
// calling thread for one scope and restores the caller's after; the kernel entry points that use the FPU
// take one, on every OpenMP thread that runs them. Exception masks and sticky flags are left alone.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace qmx::detail {

class ScopedDefaultFpEnv {
 public:
#if defined(__x86_64__) || defined(__i386__)
  ScopedDefaultFpEnv() : saved_(_mm_getcsr()) {
    if ((saved_ & kModeBits) != 0) _mm_setcsr(saved_ & ~kModeBits);
  }
  ~ScopedDefaultFpEnv() {
    if ((saved_ & kModeBits) != 0) _mm_setcsr(saved_);
  }

 private:
  static constexpr unsigned kModeBits = 0xE040u;  // MXCSR: rounding control (bits 13-14), FTZ (15), DAZ (6)
  unsigned saved_;
#else
  ScopedDefaultFpEnv() = default;  // other architectures: the default environment is assumed
#endif
  ScopedDefaultFpEnv(const ScopedDefaultFpEnv&) = delete;
  ScopedDefaultFpEnv& operator=(const ScopedDefaultFpEnv&) = delete;
};

}  // namespace qmx::detail
