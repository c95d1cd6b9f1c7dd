// The experiment's files: allocation_curves.csv (the columns of the published
// reference_allocation_curves.csv) and summary.md, plus the reader of a reference CSV.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/common.h"
#include "sim/alloc_experiment.h"

namespace cnlab::sim {

// The file name of the published curves, looked for beside a pod file when --reference is absent.
inline constexpr std::string_view kReferenceFileName = "reference_allocation_curves.csv";

// Curves by (workload, policy), values in hundredths of a percent (kNoValue when empty).
struct ReferenceCurves {
  std::string source;  // the path it came from
  std::map<std::pair<std::string, std::string>, std::vector<int64_t>> curves;
  const std::vector<int64_t>* find(const std::string& workload, const std::string& policy) const;
};

// `workload,policy,seeds,arrived_0..arrived_N`. Errors name FILE:LINE:COLUMN and the value.
Result<ReferenceCurves> parse_reference_curves(std::string_view text, std::string file_label);
Result<ReferenceCurves> load_reference_curves(const std::string& path);

// `workload,policy,seeds,arrived_0,...,arrived_<tune_percent>`, one row per (workload, policy):
// the mean over the seeds, written as the reference writes numbers ("95.23", "1.0").
std::string curves_csv(const ExperimentResult& result);

// A Markdown report: per workload a table of each policy's allocation at 100% and at
// tune_percent % arrived, and, where `reference` has the pair, the reference and the difference.
std::string summary_markdown(const ExperimentResult& result, const ReferenceCurves* reference);

// With migrations: per workload and policy, the pods placed by moving others, the moves, and moves
// per 100 placed pods (means over the seeds). Empty when no run moved anything.
std::string migrations_markdown(const ExperimentResult& result);

// Writes `text` to `path` (replacing it); the error names the path.
Status write_text_file(const std::string& path, std::string_view text);

}  // namespace cnlab::sim
