// The published traces the simulator is checked against. They live in ../shared/data (CI has them
// beside the checkout) and are never copied into the repository; where they are absent the tests
// that need them skip, saying where they looked and how to point the build at them.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace cnlab::sim::testing {

inline std::string openb_path(std::string_view file) {
  return std::string(CNLAB_SHARED_DATA) + "/alibaba-openb-2023/" + std::string(file);
}

}  // namespace cnlab::sim::testing

// Skips the calling test when the openb trace is not there.
#define CNLAB_SKIP_WITHOUT_OPENB_TRACE()                                                                    \
  if (!std::filesystem::exists(::cnlab::sim::testing::openb_path("openb_pod_list_default.csv")))           \
  GTEST_SKIP() << "the Alibaba openb trace is not at " << ::cnlab::sim::testing::openb_path("")            \
               << "; it lives in ../shared/data beside the checkout (configure with "                     \
                  "-DCNLAB_SHARED_DATA=<dir holding alibaba-openb-2023/>)"
