// qmx/detail/uninit_allocator.h: the allocator behind qmx::CodeVector (qmx/quantize.h). An
// implementation detail that the public type needs to be complete; not part of the API.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace qmx::detail {

// std::allocator with 64-byte aligned storage whose construct() default-initializes: a resize leaves new
// bytes unwritten (the quantizers write every code themselves).
template <class T>
struct UninitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <class U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  // The unsized aligned delete: clang 14 declares no sized form unless -fsized-deallocation.
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{64}); }
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// A vector with this allocator compares with a plain one element by element (found by argument-dependent
// lookup through the allocator's namespace).
template <class T>
bool operator==(const std::vector<T, UninitAllocator<T>>& a, const std::vector<T>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}
template <class T>
bool operator==(const std::vector<T>& a, const std::vector<T, UninitAllocator<T>>& b) {
  return b == a;
}
template <class T>
bool operator!=(const std::vector<T, UninitAllocator<T>>& a, const std::vector<T>& b) {
  return !(a == b);
}
template <class T>
bool operator!=(const std::vector<T>& a, const std::vector<T, UninitAllocator<T>>& b) {
  return !(b == a);
}

}  // namespace qmx::detail
