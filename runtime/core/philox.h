#pragma once

// Note [Philox streams]
// kiln's random numbers come from Philox4x32-10 (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3"), a counter-based generator: block b of a call's
// stream is philox(key = seed, counter = {b, call_offset}), four 32-bit words.
// Element i of a fresh (contiguous) output reads its words from a fixed block
// and lane, so every device and every thread split produces the same values:
//   float32: block i/4, lane i%4, 24 bits;  float16: 11 bits;  bfloat16: 8 bits
//   float64: block i/2, lanes 2(i%2), 2(i%2)+1, 53 bits
//   randn:   block i/2, lanes 2(i%2) (u1), 2(i%2)+1 (u2), Box-Muller cosine branch
//   randint: block i/2, two lanes as a 64-bit word, modulo the range
// Each call takes the generator's next offset.

#include <cstdint>

namespace kiln {

struct Philox4 {
  uint32_t v[4];
};

inline Philox4 philox4x32(uint64_t seed, uint64_t block, uint64_t offset) {
  uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32);
  uint32_t c2 = static_cast<uint32_t>(offset), c3 = static_cast<uint32_t>(offset >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// The generator state every device's random kernels read.
struct RandomState {
  uint64_t seed;
  uint64_t offset;
};
// Takes the next call offset of the default generator.
RandomState next_random_state();

}  // namespace kiln
