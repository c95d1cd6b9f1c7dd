// CNLAB_CHECK: aborts on a broken invariant (a bug), never for bad input.
#pragma once

#include <string>

namespace cnlab::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* condition, const std::string& message);
}  // namespace cnlab::detail

#define CNLAB_CHECK(cond) \
  ((cond) ? (void)0 : ::cnlab::detail::check_failed(__FILE__, __LINE__, #cond, std::string()))
#define CNLAB_CHECK_MSG(cond, msg) \
  ((cond) ? (void)0 : ::cnlab::detail::check_failed(__FILE__, __LINE__, #cond, (msg)))
