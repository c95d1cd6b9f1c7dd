#include "sim/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "sim/alloc_measure.h"

namespace cnlab::sim {
namespace {

// Okabe-Ito colours (distinguishable with the common colour-vision deficiencies), ordered so that
// the six baselines get the most distinct ones, then a few more.
constexpr std::array<std::string_view, 10> kColours = {"#999999", "#56B4E9", "#009E73", "#E69F00", "#0072B2",
                                                       "#D55E00", "#CC79A7", "#000000", "#F0E442", "#7F3C8D"};

constexpr int kPanelWidth = 460, kPanelHeight = 300;
constexpr int kLeft = 56, kRight = 16, kTop = 30, kBottom = 46;  // margins around the plot area
constexpr int kLegendHeight = 28;
// The zoomed panel starts here: below it every policy places nearly everything that arrives.
constexpr int kZoomFromPercent = 70;

struct Range {
  double x0, x1, y0, y1, x_step, y_step;
};

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

class Chart {
 public:
  Chart(const ExperimentResult& result, std::vector<std::string> policies)
      : result_(result), policies_(std::move(policies)) {}

  // One panel at (ox, oy): frame, grid, tick labels, axis titles and every policy's curve of
  // `workload`, clipped to `range`.
  void panel(int ox, int oy, const std::string& workload, const std::string& title, const Range& r) {
    const int pw = kPanelWidth - kLeft - kRight, ph = kPanelHeight - kTop - kBottom;
    const int px = ox + kLeft, py = oy + kTop;
    auto sx = [&](double x) { return px + (x - r.x0) / (r.x1 - r.x0) * pw; };
    auto sy = [&](double y) { return py + ph - (y - r.y0) / (r.y1 - r.y0) * ph; };
    const int clip = clip_id_++;

    svg_ += fmt::format("<g>\n<clipPath id=\"c{}\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/></clipPath>\n", clip,
                        px, py, pw, ph);
    svg_ += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
                        px + pw / 2, oy + 18, escape(title));
    for (double y = r.y0; y <= r.y1 + 1e-9; y += r.y_step) {
      svg_ += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#e0e0e0\"/>", px, sy(y), px + pw, sy(y));
      svg_ += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", px - 6, sy(y) + 4, y);
    }
    for (double x = r.x0; x <= r.x1 + 1e-9; x += r.x_step) {
      svg_ += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#e0e0e0\"/>", sx(x), py, sx(x), py + ph);
      svg_ += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", sx(x), py + ph + 15, x);
    }
    svg_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", px, py, pw, ph);
    svg_ += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">arrived GPU demand (% of capacity)</text>\n",
                        px + pw / 2, py + ph + 33);
    svg_ += fmt::format("<text x=\"{0}\" y=\"{1}\" text-anchor=\"middle\" transform=\"rotate(-90 {0} {1})\">"
                        "GPU allocation (%)</text>\n",
                        ox + 16, py + ph / 2);
    for (const PolicyCurve& c : result_.curves) {
      if (c.workload != workload) continue;
      std::string points;
      for (size_t k = 0; k < c.mean.size(); ++k) {
        if (c.mean[k] == kNoValue || static_cast<double>(k) < r.x0 || static_cast<double>(k) > r.x1) continue;
        points += fmt::format("{:.1f},{:.1f} ", sx(static_cast<double>(k)), sy(static_cast<double>(c.mean[k]) / 100.0));
      }
      svg_ += fmt::format(
          "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\" clip-path=\"url(#c{})\" points=\"{}\">"
          "<title>{}</title></polyline>\n",
          colour(c.policy), clip, points, escape(c.policy));
    }
    svg_ += "</g>\n";
  }

  void legend() {
    int x = 12;
    for (const std::string& policy : policies_) {
      svg_ += fmt::format("<line x1=\"{}\" y1=\"14\" x2=\"{}\" y2=\"14\" stroke=\"{}\" stroke-width=\"3\"/>", x, x + 22,
                          colour(policy));
      svg_ += fmt::format("<text x=\"{}\" y=\"18\">{}</text>\n", x + 28, escape(policy));
      x += 40 + static_cast<int>(policy.size()) * 7;
    }
  }

  std::string_view colour(const std::string& policy) const {
    size_t p = static_cast<size_t>(std::find(policies_.begin(), policies_.end(), policy) - policies_.begin());
    return kColours[p % kColours.size()];
  }

  std::string& svg() { return svg_; }

 private:
  const ExperimentResult& result_;
  std::vector<std::string> policies_;
  std::string svg_;
  int clip_id_ = 0;
};

// The zoomed panel's y range: from the lowest curve point past kZoomFromPercent, rounded down to
// a multiple of 5, up to the highest rounded up, at least 5 points tall.
Range zoom_range(const ExperimentResult& result, const std::string& workload) {
  double lo = 100, hi = 0;
  for (const PolicyCurve& c : result.curves) {
    if (c.workload != workload) continue;
    for (size_t k = kZoomFromPercent; k < c.mean.size(); ++k) {
      if (c.mean[k] == kNoValue) continue;
      lo = std::min(lo, static_cast<double>(c.mean[k]) / 100.0);
      hi = std::max(hi, static_cast<double>(c.mean[k]) / 100.0);
    }
  }
  if (lo > hi) lo = 0, hi = 100;
  double y0 = std::floor(lo / 5) * 5, y1 = std::min(100.0, std::ceil(hi / 5) * 5);
  if (y1 - y0 < 5) y0 = std::max(0.0, y1 - 5);
  double step = y1 - y0 > 20 ? 10 : y1 - y0 > 10 ? 5 : 1;
  return {kZoomFromPercent, static_cast<double>(result.tune_percent), y0, y1, 10, step};
}

}  // namespace

std::string allocation_svg(const ExperimentResult& result) {
  std::vector<std::string> workloads, policies;
  for (const PolicyCurve& c : result.curves) {
    if (std::find(workloads.begin(), workloads.end(), c.workload) == workloads.end()) workloads.push_back(c.workload);
    if (std::find(policies.begin(), policies.end(), c.policy) == policies.end()) policies.push_back(c.policy);
  }
  const bool zoom = result.tune_percent > kZoomFromPercent + 10;
  const int columns = zoom ? 2 : 1;
  const int width = columns * kPanelWidth;
  const int height = kLegendHeight + std::max<int>(static_cast<int>(workloads.size()), 1) * kPanelHeight;

  Chart chart(result, policies);
  chart.svg() = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height);
  chart.legend();
  const double x_max = result.tune_percent;
  for (size_t w = 0; w < workloads.size(); ++w) {
    const int oy = kLegendHeight + static_cast<int>(w) * kPanelHeight;
    chart.panel(0, oy, workloads[w], workloads[w], Range{0, x_max, 0, 100, 20, 20});
    if (zoom) {
      chart.panel(kPanelWidth, oy, workloads[w], workloads[w] + " (zoomed)", zoom_range(result, workloads[w]));
    }
  }
  chart.svg() += "</svg>\n";
  return std::move(chart.svg());
}

}  // namespace cnlab::sim

// --- Time series (the replay experiment) ----------------------------------------------------

namespace cnlab::sim {
namespace {

constexpr int kSeriesWidth = 920, kSeriesHeight = 240;

// 1, 2 or 5 times a power of ten, so that `range` gets about `ticks` steps.
double nice_step(double range, int ticks) {
  if (!(range > 0)) return 1;
  double raw = range / ticks;
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw) return m * magnitude;
  }
  return 10 * magnitude;
}

std::string tick_text(double value, double step) {
  return step >= 1 ? fmt::format("{:.0f}", value) : fmt::format("{:.{}f}", value, static_cast<int>(-std::floor(std::log10(step))));
}

}  // namespace

std::string time_series_svg(const std::vector<ChartPanel>& panels, const std::string& x_label) {
  std::vector<std::string> names;
  double x0 = 0, x1 = 0;
  bool any = false;
  for (const ChartPanel& panel : panels) {
    for (const ChartSeries& s : panel.series) {
      if (std::find(names.begin(), names.end(), s.name) == names.end()) names.push_back(s.name);
      for (const auto& [x, y] : s.points) {
        x0 = any ? std::min(x0, x) : x;
        x1 = any ? std::max(x1, x) : x;
        any = true;
      }
    }
  }
  if (!(x1 > x0)) x1 = x0 + 1;
  auto colour = [&](const std::string& name) {
    size_t i = static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
    // Skip the grey that leads the allocation chart's palette: two or three lines read better in
    // strong colours.
    return kColours[(i + 4) % kColours.size()];
  };
  const int height = kLegendHeight + static_cast<int>(panels.size()) * kSeriesHeight;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      kSeriesWidth, height);
  int lx = 12;
  for (const std::string& name : names) {
    svg += fmt::format("<line x1=\"{}\" y1=\"14\" x2=\"{}\" y2=\"14\" stroke=\"{}\" stroke-width=\"3\"/>", lx, lx + 22,
                       colour(name));
    svg += fmt::format("<text x=\"{}\" y=\"18\">{}</text>\n", lx + 28, escape(name));
    lx += 40 + static_cast<int>(name.size()) * 7;
  }
  const double x_step = nice_step(x1 - x0, 10);
  for (size_t p = 0; p < panels.size(); ++p) {
    const ChartPanel& panel = panels[p];
    double y_max = panel.y_max;
    if (!(y_max > 0)) {
      for (const ChartSeries& s : panel.series) {
        for (const auto& point : s.points) y_max = std::max(y_max, point.second);
      }
      if (!(y_max > 0)) y_max = 1;
    }
    const double y_step = nice_step(y_max, 5);
    y_max = std::ceil(y_max / y_step - 1e-9) * y_step;
    const int oy = kLegendHeight + static_cast<int>(p) * kSeriesHeight;
    const int pw = kSeriesWidth - kLeft - kRight, ph = kSeriesHeight - kTop - kBottom;
    const int px = kLeft, py = oy + kTop;
    auto sx = [&](double x) { return px + (x - x0) / (x1 - x0) * pw; };
    auto sy = [&](double y) { return py + ph - y / y_max * ph; };
    svg += fmt::format("<g>\n<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
                       px + pw / 2, oy + 18, escape(panel.title));
    for (double y = 0; y <= y_max + 1e-9; y += y_step) {
      svg += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#e0e0e0\"/>", px, sy(y), px + pw, sy(y));
      svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", px - 6, sy(y) + 4, tick_text(y, y_step));
    }
    for (double x = std::ceil(x0 / x_step) * x_step; x <= x1 + 1e-9; x += x_step) {
      svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#e0e0e0\"/>", sx(x), py, sx(x), py + ph);
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", sx(x), py + ph + 15, tick_text(x, x_step));
    }
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", px, py, pw, ph);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px + pw / 2, py + ph + 33, escape(x_label));
    svg += fmt::format("<text x=\"{0}\" y=\"{1}\" text-anchor=\"middle\" transform=\"rotate(-90 {0} {1})\">{2}</text>\n", 16,
                       py + ph / 2, escape(panel.y_label));
    for (const ChartSeries& s : panel.series) {
      std::string points;
      for (const auto& [x, y] : s.points) points += fmt::format("{:.1f},{:.1f} ", sx(x), sy(std::min(y, y_max)));
      svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.4\" points=\"{}\"><title>{}</title></polyline>\n",
                         colour(s.name), points, escape(s.name));
    }
    svg += "</g>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace cnlab::sim
