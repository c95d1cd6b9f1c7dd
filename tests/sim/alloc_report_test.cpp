#include "sim/alloc_report.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "shared_data.h"

#include <filesystem>
#include <fstream>

#include "sim/alloc_measure.h"
#include "sim/svg_chart.h"

namespace cnlab::sim {
namespace {

ExperimentResult two_policies() {
  ExperimentResult r;
  r.tune_percent = 130;
  for (const char* policy : {"BestFit", "FGD"}) {
    PolicyCurve c;
    c.workload = "openb_pod_list_default";
    c.policy = policy;
    c.runs.resize(10);
    c.mean.assign(131, kNoValue);
    for (int k = 0; k <= 130; ++k) c.mean[static_cast<size_t>(k)] = std::min(k, 93) * 100 + (policy[0] == 'F' ? 230 : 0);
    c.mean[100] = policy[0] == 'F' ? 9523 : 9286;
    c.mean[130] = policy[0] == 'F' ? 9540 : 9300;
    r.curves.push_back(c);
  }
  return r;
}

TEST(AllocReport, CurvesCsvHasExactlyTheReferenceColumns) {
  std::string csv = curves_csv(two_policies());
  std::string header = csv.substr(0, csv.find('\n'));
  std::string expected = "workload,policy,seeds";
  for (int k = 0; k <= 130; ++k) expected += fmt::format(",arrived_{}", k);
  EXPECT_EQ(header, expected);
  if (std::ifstream in{testing::openb_path("reference_allocation_curves.csv")}) {
    std::string first;
    std::getline(in, first);
    if (!first.empty() && first.back() == '\r') first.pop_back();  // the published file ends lines with CRLF
    EXPECT_EQ(header, first);
  }
  EXPECT_NE(csv.find("\nopenb_pod_list_default,FGD,10,2.3,3.3,"), std::string::npos) << csv.substr(0, 700);
  EXPECT_NE(csv.find(",95.23,"), std::string::npos);
}

TEST(AllocReport, ReferenceCurvesRoundTripThroughOurCsv) {
  auto parsed = parse_reference_curves(curves_csv(two_policies()), "ours.csv");
  ASSERT_TRUE(parsed) << parsed.error().to_string();
  const auto* fgd = parsed->find("openb_pod_list_default", "FGD");
  ASSERT_NE(fgd, nullptr);
  EXPECT_EQ((*fgd)[100], 9523);
  EXPECT_EQ(parsed->find("openb_pod_list_default", "Random"), nullptr);
}

TEST(AllocReport, ReferenceErrorsNameTheCell) {
  auto bad = parse_reference_curves("workload,policy,seeds,arrived_0,arrived_1\nw,p,10,1.0,lots\n", "ref.csv");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "ref.csv:2:arrived_1");
  EXPECT_EQ(bad.error().value, "lots");
  EXPECT_FALSE(parse_reference_curves("workload,policy\nw,p\n", "ref.csv"));
}

TEST(AllocReport, SummaryShowsOursTheReferenceAndTheDifference) {
  ExperimentResult r = two_policies();
  ReferenceCurves ref;
  ref.source = "ref.csv";
  ref.curves[{"openb_pod_list_default", "FGD"}] = std::vector<int64_t>(131, 9539);
  std::string md = summary_markdown(r, &ref);
  EXPECT_NE(md.find("## openb_pod_list_default"), std::string::npos);
  // Seed runs without curves have no spread ("-"); see SummaryShowsTheSpreadOverSeeds.
  EXPECT_NE(md.find("| FGD | 95.23 | - | 95.39 | -0.16 | 95.40 | - | 95.39 | +0.01 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| BestFit | 92.86 | - | - | - | 93.00 | - | - | - |"), std::string::npos) << md;
  std::string plain = summary_markdown(r, nullptr);
  EXPECT_NE(plain.find("| BestFit | 92.86 | - | 93.00 | - |"), std::string::npos) << plain;
}

TEST(AllocReport, SummaryShowsTheSpreadOverSeeds) {
  ExperimentResult r = two_policies();
  r.curves.resize(1);
  // Seeds at 100%: 92, 94, 96 -> sample sd 2.00; at 130%: all 93 -> 0.00.
  for (size_t s = 0; s < 3; ++s) {
    r.curves[0].runs[s].result.curve.assign(131, 9300);
    r.curves[0].runs[s].result.curve[100] = 9200 + 200 * static_cast<int64_t>(s);
  }
  r.curves[0].runs.resize(3);
  std::string md = summary_markdown(r, nullptr);
  EXPECT_NE(md.find("| BestFit | 92.86 | 2.00 | 93.00 | 0.00 |"), std::string::npos) << md;
}

TEST(SvgChart, DrawsEachPolicyInTheFullAndTheZoomedPanelWithAxesAndLegend) {
  std::string svg = allocation_svg(two_policies());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t lines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++lines;
  EXPECT_EQ(lines, 4u);  // 2 policies x (0..130% panel + zoomed plateau panel)
  EXPECT_NE(svg.find("openb_pod_list_default (zoomed)"), std::string::npos);
  EXPECT_NE(svg.find("arrived GPU demand (% of capacity)"), std::string::npos);
  EXPECT_NE(svg.find("GPU allocation (%)"), std::string::npos);
  EXPECT_NE(svg.find(">FGD</text>"), std::string::npos);
  EXPECT_NE(svg.find("openb_pod_list_default"), std::string::npos);
}

}  // namespace
}  // namespace cnlab::sim
