#include "sim/alloc_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

#include "sim/alloc_measure.h"
#include "sim/csv_reader.h"

namespace cnlab::sim {
namespace {

// Signed difference in points, "+0.12" / "-1.05" / "+0.00".
std::string signed_points(int64_t hundredths) {
  return fmt::format("{}{}.{:02}", hundredths < 0 ? "-" : "+", std::abs(hundredths) / 100, std::abs(hundredths) % 100);
}

std::string fixed2(int64_t hundredths) {
  if (hundredths == kNoValue) return "-";
  return fmt::format("{}.{:02}", hundredths / 100, hundredths % 100);
}

int64_t at(const std::vector<int64_t>& curve, int k) {
  return k >= 0 && static_cast<size_t>(k) < curve.size() ? curve[static_cast<size_t>(k)] : kNoValue;
}

// The sample standard deviation over the seeds at point k, in points ("0.42"); "-" for fewer
// than two values. It tells a reader whether a difference from the reference is seed noise.
std::string seed_spread(const PolicyCurve& c, int k) {
  std::vector<double> values;
  for (const SeedRun& run : c.runs) {
    int64_t v = at(run.result.curve, k);
    if (v != kNoValue) values.push_back(static_cast<double>(v) / 100.0);
  }
  if (values.size() < 2) return "-";
  double mean = 0;
  for (double v : values) mean += v;
  mean /= static_cast<double>(values.size());
  double squares = 0;
  for (double v : values) squares += (v - mean) * (v - mean);
  return fmt::format("{:.2f}", std::sqrt(squares / static_cast<double>(values.size() - 1)));
}

// One line under a workload's table: the mean (and range over the seeds) of what any policy that
// places every pod that fits could reach by the end, and the pod size that bounds it.
std::string ceiling_line(const ExperimentResult& result, const std::string& workload) {
  for (const WorkloadCeiling& c : result.ceilings) {
    if (c.workload != workload || c.per_seed.empty() || result.curves.empty()) continue;
    const int64_t capacity = result.curves[0].runs.empty() ? 0 : result.curves[0].runs[0].result.leftovers.capacity;
    if (capacity <= 0) return "";
    double sum = 0, low = 1e9, high = -1e9;
    std::set<int32_t> sizes;
    for (const AllocationCeiling& s : c.per_seed) {
      const double pct = 100.0 * static_cast<double>(s.gpu_milli) / static_cast<double>(capacity);
      sum += pct;
      low = std::min(low, pct);
      high = std::max(high, pct);
      if (s.hole_maker > 0) sizes.insert(s.hole_maker);
    }
    std::string why = sizes.empty() ? "the arrived demand and the capacity"
                                    : fmt::format("the {} milli pods", fmt::join(sizes, " and "));
    return fmt::format(
        "\nCeiling for any policy that places every pod that fits: {:.2f}% at the end (seeds {:.2f}..{:.2f}), "
        "bounded by {}.\n",
        sum / static_cast<double>(c.per_seed.size()), low, high, why);
  }
  return "";
}

}  // namespace

const std::vector<int64_t>* ReferenceCurves::find(const std::string& workload, const std::string& policy) const {
  auto it = curves.find({workload, policy});
  return it == curves.end() ? nullptr : &it->second;
}

std::string migrations_markdown(const ExperimentResult& result) {
  bool any = false;
  for (const PolicyCurve& c : result.curves) {
    for (const SeedRun& r : c.runs) any |= r.result.moves > 0;
  }
  if (!any) return "";
  std::string out =
      "\n## Migrations\n\nPods placed by moving placed pods to make room (mean over the seeds).\n\n"
      "| workload | policy | placed by moving | moves | moves per 100 placed pods |\n|---|---|---:|---:|---:|\n";
  for (const PolicyCurve& c : result.curves) {
    double by_moving = 0, moves = 0, placed = 0;
    for (const SeedRun& r : c.runs) {
      by_moving += static_cast<double>(r.result.placed_by_moving);
      moves += static_cast<double>(r.result.moves);
      placed += static_cast<double>(r.result.placed);
    }
    double n = c.runs.empty() ? 1 : static_cast<double>(c.runs.size());
    out += fmt::format("| {} | {} | {:.1f} | {:.1f} | {:.2f} |\n", c.workload, c.policy, by_moving / n, moves / n,
                       placed > 0 ? 100 * moves / placed : 0.0);
  }
  return out;
}

Result<ReferenceCurves> parse_reference_curves(std::string_view text, std::string file_label) {
  // The header's arrived_k columns are counted first so that the reader can map each by name.
  std::string_view first_line = text.substr(0, text.find('\n'));
  size_t arrived = 0;
  while (first_line.find(fmt::format("arrived_{}", arrived)) != std::string_view::npos) ++arrived;
  std::vector<std::string> names;
  for (size_t k = 0; k < arrived; ++k) names.push_back(fmt::format("arrived_{}", k));
  std::vector<CsvColumn> columns = {{"workload"}, {"policy"}, {"seeds", false}};
  for (const auto& name : names) columns.push_back({name});
  CsvReader csv(text, std::move(file_label));
  if (auto header = csv.read_header(columns); !header) return header.error();
  if (arrived == 0) {
    return Error::invalid_argument(fmt::format("{}:1:header", csv.file_label()), std::string(first_line),
                                   "expected columns workload,policy,seeds,arrived_0,arrived_1,...");
  }
  ReferenceCurves out;
  out.source = csv.file_label();
  while (csv.next_row()) {
    if (auto width = csv.check_width(); !width) return width.error();
    std::vector<int64_t> values(arrived, kNoValue);
    for (size_t k = 0; k < arrived; ++k) {
      if (csv.cell(3 + k).empty()) continue;
      auto value = csv.number(3 + k);
      if (!value || *value < 0 || *value > 1000) return csv.bad(3 + k, "must be a percentage 0..1000 or empty");
      values[k] = std::llround(*value * 100);
    }
    out.curves[{std::string(csv.cell(0)), std::string(csv.cell(1))}] = std::move(values);
  }
  return out;
}

Result<ReferenceCurves> load_reference_curves(const std::string& path) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  return parse_reference_curves(*text, path);
}

std::string curves_csv(const ExperimentResult& result) {
  std::string out = "workload,policy,seeds";
  for (int k = 0; k <= result.tune_percent; ++k) out += fmt::format(",arrived_{}", k);
  out += '\n';
  for (const PolicyCurve& c : result.curves) {
    out += fmt::format("{},{},{}", c.workload, c.policy, c.runs.size());
    for (int k = 0; k <= result.tune_percent; ++k) {
      out += ',';
      out += format_hundredths(at(c.mean, k));
    }
    out += '\n';
  }
  return out;
}

std::string summary_markdown(const ExperimentResult& result, const ReferenceCurves* reference) {
  const int top = result.tune_percent;
  std::string out = "# Allocation experiment\n\n";
  out += fmt::format(
      "GPU allocation (% of cluster GPU capacity) when the arrived GPU demand reaches 100% and {}% of "
      "capacity; mean over {} seed(s); sd = standard deviation over the seeds.",
      top, result.curves.empty() ? 0 : result.curves[0].runs.size());
  if (reference != nullptr)
    out += fmt::format(" Reference: `{}`; diff = ours - reference, in points.", reference->source);
  out += "\n";
  std::string workload;
  for (const PolicyCurve& c : result.curves) {
    if (c.workload != workload) {
      if (!workload.empty()) out += ceiling_line(result, workload);
      workload = c.workload;
      out += fmt::format("\n## {}\n\n", workload);
      if (reference != nullptr) {
        out += fmt::format("| policy | at 100% | sd | reference | diff | at {0}% | sd | reference | diff |\n", top);
        out += "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
      } else {
        out += fmt::format("| policy | at 100% | sd | at {}% | sd |\n|---|---:|---:|---:|---:|\n", top);
      }
    }
    int64_t ours100 = at(c.mean, 100), ours_top = at(c.mean, top);
    if (reference == nullptr) {
      out += fmt::format("| {} | {} | {} | {} | {} |\n", c.policy, fixed2(ours100), seed_spread(c, 100),
                         fixed2(ours_top), seed_spread(c, top));
      continue;
    }
    const std::vector<int64_t>* ref = reference->find(c.workload, c.policy);
    int64_t ref100 = ref ? at(*ref, 100) : kNoValue, ref_top = ref ? at(*ref, top) : kNoValue;
    auto diff = [](int64_t a, int64_t b) {
      return a == kNoValue || b == kNoValue ? std::string("-") : signed_points(a - b);
    };
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", c.policy, fixed2(ours100),
                       seed_spread(c, 100), fixed2(ref100), diff(ours100, ref100), fixed2(ours_top),
                       seed_spread(c, top), fixed2(ref_top), diff(ours_top, ref_top));
  }
  if (!workload.empty()) out += ceiling_line(result, workload);
  return out;
}

Status write_text_file(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Error::invalid_argument(path, "", fmt::format("cannot write file: {}", std::strerror(errno)));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) return Error::invalid_argument(path, "", "cannot write file");
  return Status::ok();
}

}  // namespace cnlab::sim
