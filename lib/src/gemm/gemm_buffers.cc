// gemm_buffers.cc: the pool of the GEMM kernels' packing buffers (gemm_simd.h, TakeBuffer / GiveBuffer).
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

#include "gemm/gemm_simd.h"

namespace qmx::simd {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kMaxPooledBytes = size_t{256} << 20;
constexpr size_t kMaxPooledBlocks = 32;

struct Pool {
  std::mutex mutex;
  struct Block {
    void* p;
    size_t bytes;
  };
  std::vector<Block> blocks;  // oldest first
  size_t bytes = 0;
  ~Pool() {
    for (const Block& b : blocks) std::free(b.p);
  }
};
Pool& ThePool() {
  static Pool pool;
  return pool;
}

}  // namespace

void* TakeBuffer(size_t& bytes) {
  bytes = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  {
    Pool& pool = ThePool();
    const std::lock_guard<std::mutex> lock(pool.mutex);
    // The smallest pooled block that fits and is at most twice the request.
    auto best = pool.blocks.end();
    for (auto it = pool.blocks.begin(); it != pool.blocks.end(); ++it)
      if (it->bytes >= bytes && it->bytes / 2 <= bytes && (best == pool.blocks.end() || it->bytes < best->bytes))
        best = it;
    if (best != pool.blocks.end()) {
      void* p = best->p;
      bytes = best->bytes;
      pool.bytes -= best->bytes;
      pool.blocks.erase(best);
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlign, bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void GiveBuffer(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes > kMaxPooledBytes) {
    std::free(p);
    return;
  }
  Pool& pool = ThePool();
  std::vector<void*> drop;
  {
    const std::lock_guard<std::mutex> lock(pool.mutex);
    // Room for the block: the oldest ones go.
    size_t n = 0;
    while (n < pool.blocks.size() &&
           (pool.bytes + bytes > kMaxPooledBytes || pool.blocks.size() - n + 1 > kMaxPooledBlocks)) {
      pool.bytes -= pool.blocks[n].bytes;
      drop.push_back(pool.blocks[n].p);
      ++n;
    }
    pool.blocks.erase(pool.blocks.begin(), pool.blocks.begin() + static_cast<long>(n));
    try {
      pool.blocks.push_back({p, bytes});
      pool.bytes += bytes;
      p = nullptr;
    } catch (...) {  // no room for the entry: the block goes back to the allocator
    }
  }
  for (void* d : drop) std::free(d);
  std::free(p);
}

}  // namespace qmx::simd
