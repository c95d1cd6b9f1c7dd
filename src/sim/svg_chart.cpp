#include "sim/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <vector>

#include "sim/alloc_measure.h"

namespace cnlab::sim {
namespace {

// Distinguishable for the common forms of colour blindness (Okabe-Ito), then a few more.
constexpr std::array<std::string_view, 10> kColours = {"#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2",
                                                       "#D55E00", "#CC79A7", "#000000", "#999999", "#7F3C8D"};

constexpr int kPanelWidth = 440, kPanelHeight = 320;
constexpr int kLeft = 56, kRight = 16, kTop = 34, kBottom = 48;  // panel margins around the plot

std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::string allocation_svg(const ExperimentResult& result) {
  std::vector<std::string> workloads, policies;
  for (const PolicyCurve& c : result.curves) {
    if (std::find(workloads.begin(), workloads.end(), c.workload) == workloads.end()) workloads.push_back(c.workload);
    if (std::find(policies.begin(), policies.end(), c.policy) == policies.end()) policies.push_back(c.policy);
  }
  const int columns = workloads.size() <= 1 ? 1 : workloads.size() <= 4 ? 2 : 3;
  const int rows = static_cast<int>((workloads.size() + static_cast<size_t>(columns) - 1) / static_cast<size_t>(columns));
  const int legend_height = 28;
  const int width = columns * kPanelWidth, height = legend_height + std::max(rows, 1) * kPanelHeight;
  const int x_max = result.tune_percent;

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height);

  // Legend: one swatch per policy across the top.
  int lx = 12;
  for (size_t p = 0; p < policies.size(); ++p) {
    std::string_view colour = kColours[p % kColours.size()];
    svg += fmt::format("<line x1=\"{}\" y1=\"14\" x2=\"{}\" y2=\"14\" stroke=\"{}\" stroke-width=\"3\"/>", lx, lx + 22, colour);
    svg += fmt::format("<text x=\"{}\" y=\"18\">{}</text>\n", lx + 28, escape(policies[p]));
    lx += 40 + static_cast<int>(policies[p].size()) * 7;
  }

  for (size_t w = 0; w < workloads.size(); ++w) {
    const int ox = static_cast<int>(w % static_cast<size_t>(columns)) * kPanelWidth;
    const int oy = legend_height + static_cast<int>(w / static_cast<size_t>(columns)) * kPanelHeight;
    const int pw = kPanelWidth - kLeft - kRight, ph = kPanelHeight - kTop - kBottom;
    const int px = ox + kLeft, py = oy + kTop;
    auto sx = [&](double x) { return px + x / x_max * pw; };
    auto sy = [&](double y) { return py + ph - y / 100.0 * ph; };

    svg += fmt::format("<g>\n<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
                       px + pw / 2, oy + 20, escape(workloads[w]));
    for (int y = 0; y <= 100; y += 20) {
      svg += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#e0e0e0\"/>", px, sy(y), px + pw, sy(y));
      svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", px - 6, sy(y) + 4, y);
    }
    for (int x = 0; x <= x_max; x += 20) {
      svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#e0e0e0\"/>", sx(x), py, sx(x), py + ph);
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", sx(x), py + ph + 16, x);
    }
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", px, py, pw, ph);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">arrived GPU demand (% of capacity)</text>\n",
                       px + pw / 2, py + ph + 36);
    svg += fmt::format("<text x=\"{0}\" y=\"{1}\" text-anchor=\"middle\" transform=\"rotate(-90 {0} {1})\">"
                       "GPU allocation (%)</text>\n",
                       ox + 16, py + ph / 2);

    for (const PolicyCurve& c : result.curves) {
      if (c.workload != workloads[w]) continue;
      size_t p = static_cast<size_t>(std::find(policies.begin(), policies.end(), c.policy) - policies.begin());
      std::string points;
      for (size_t k = 0; k < c.mean.size(); ++k) {
        if (c.mean[k] == kNoValue) continue;
        points += fmt::format("{:.1f},{:.1f} ", sx(static_cast<double>(k)), sy(static_cast<double>(c.mean[k]) / 100.0));
      }
      svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\" points=\"{}\"><title>{}</title></polyline>\n",
                         kColours[p % kColours.size()], points, escape(c.policy));
    }
    svg += "</g>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace cnlab::sim
