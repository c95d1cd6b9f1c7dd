#include "sim/rng.h"

#include "common/check.h"

namespace cnlab::sim {
namespace {

// SplitMix64's finaliser: spreads nearby (seed, stream) pairs over the whole 64-bit space.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

Rng::Rng(uint64_t seed, uint64_t stream) : engine_(mix(mix(seed) ^ (stream * 0xD1B54A32D192ED03ull))) {}

uint64_t Rng::below(uint64_t n) {
  CNLAB_CHECK(n > 0);
  // 2^64 mod n: draws below it would make small results more likely than large ones.
  const uint64_t threshold = (0 - n) % n;
  while (true) {
    uint64_t x = engine_();
    if (x >= threshold) return x % n;
  }
}

}  // namespace cnlab::sim
