// A set of small integers iterated in increasing order: two-level bitset, O(1) insert and erase,
// iteration cost in proportion to the members and the 4096-wide blocks that hold any. The cluster
// state's indexes use it so that a search visits candidates in index order whatever the history
// of allocations was (a fresh cycle and an incremental placer then choose alike). Private to src/sched.
#pragma once

#include <cstdint>
#include <vector>

namespace cnlab::sched {

class IndexSet {
 public:
  static constexpr uint32_t kEnd = UINT32_MAX;

  void insert(uint32_t i) {
    uint32_t w = i >> 6;
    if (w >= words_.size()) {
      words_.resize(w + 1, 0);
      summary_.resize((w >> 6) + 1, 0);
    }
    words_[w] |= uint64_t{1} << (i & 63);
    summary_[w >> 6] |= uint64_t{1} << (w & 63);
  }

  void erase(uint32_t i) {
    uint32_t w = i >> 6;
    if (w >= words_.size()) return;
    words_[w] &= ~(uint64_t{1} << (i & 63));
    if (words_[w] == 0) summary_[w >> 6] &= ~(uint64_t{1} << (w & 63));
  }

  bool contains(uint32_t i) const {
    uint32_t w = i >> 6;
    return w < words_.size() && (words_[w] >> (i & 63) & 1);
  }

  bool empty() const {
    for (uint64_t s : summary_) {
      if (s) return false;
    }
    return true;
  }

  // The smallest member >= i, or kEnd.
  uint32_t next(uint32_t i) const {
    uint32_t w = i >> 6;
    if (w >= words_.size()) return kEnd;
    uint64_t bits = words_[w] & (~uint64_t{0} << (i & 63));
    if (bits) return (w << 6) | static_cast<uint32_t>(__builtin_ctzll(bits));
    // Next non-empty word through the summary.
    uint32_t s = (w + 1) >> 6;
    if (s >= summary_.size()) return kEnd;
    uint64_t sbits = (w + 1) & 63 ? summary_[s] & (~uint64_t{0} << ((w + 1) & 63)) : summary_[s];
    while (!sbits) {
      if (++s >= summary_.size()) return kEnd;
      sbits = summary_[s];
    }
    uint32_t nw = (s << 6) | static_cast<uint32_t>(__builtin_ctzll(sbits));
    return (nw << 6) | static_cast<uint32_t>(__builtin_ctzll(words_[nw]));
  }
  uint32_t first() const { return next(0); }

 private:
  std::vector<uint64_t> words_;
  std::vector<uint64_t> summary_;
};

}  // namespace cnlab::sched
