// Deterministic randomness for the simulator.
//
// std::mt19937_64's output is fixed by the standard, but std::shuffle and the std distributions
// are not (libstdc++ and libc++ draw differently), so shuffles and bounded draws are written here:
// the same seed gives the same run on every compiler.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>

namespace cnlab::sim {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  // An independent stream for a second consumer of the same seed (e.g. a policy's own draws), so
  // that it cannot perturb the workload's stream.
  Rng(uint64_t seed, uint64_t stream);

  uint64_t next() { return engine_(); }
  // Uniform in [0, n); n > 0. Unbiased (rejection of the short last block).
  uint64_t below(uint64_t n);

  // Fisher-Yates, from the back.
  template <typename T>
  void shuffle(std::span<T> items) {
    for (size_t i = items.size(); i > 1; --i) {
      size_t j = static_cast<size_t>(below(i));
      std::swap(items[i - 1], items[j]);
    }
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace cnlab::sim
