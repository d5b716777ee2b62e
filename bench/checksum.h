// The checksum the data-plane benchmarks' workers return (data_plane_bench, multihost_bench):
// 4-lane FNV-1a over 64-bit words (so it is memory bound, not bound by one multiply chain), the
// lanes and the length folded at the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace troupe_bench {

inline uint64_t checksum64(const uint8_t* p, size_t n) {
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  uint64_t h[4] = {0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL, 0x1b3cbf29ce484222ULL,
                   0x2325cbf29ce48422ULL};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, 32);
    for (int k = 0; k < 4; ++k) h[k] = (h[k] ^ w[k]) * kPrime;
  }
  for (; i < n; ++i) h[0] = (h[0] ^ p[i]) * kPrime;
  return h[0] ^ (h[1] * 3) ^ (h[2] * 5) ^ (h[3] * 7) ^ n;
}

// Fills [p, p+n) with xorshift64 output: not compressible, not all zero.
inline void fill_pseudo_random(uint8_t* p, size_t n) {
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p + i, &x, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(i);
}

// "1G", "256M", "4096K" or a plain number of bytes; 0 when it cannot be read.
inline size_t parse_size(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end && (*end == 'G' || *end == 'g')) v *= 1 << 30;
  if (end && (*end == 'M' || *end == 'm')) v *= 1 << 20;
  if (end && (*end == 'K' || *end == 'k')) v *= 1 << 10;
  return v >= 1 ? static_cast<size_t>(v) : 0;
}

}  // namespace troupe_bench
