// A hand-written SVG of the allocation curves: one panel per workload, allocation (%) against
// arrived GPU demand (% of capacity), one line per policy, with axes, labels and a legend.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "sim/alloc_experiment.h"

namespace cnlab::sim {

std::string allocation_svg(const ExperimentResult& result);

}  // namespace cnlab::sim

// --- Time series (the replay experiment) ----------------------------------------------------

namespace cnlab::sim {

struct ChartSeries {
  std::string name;                               // the legend's entry; one colour per name
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct ChartPanel {
  std::string title;
  std::string y_label;
  std::vector<ChartSeries> series;
  double y_max = 0;  // 0: from the data, rounded up to a tick
};

// Panels stacked one above the other over the same x axis (`x_label`), a legend on top, axes with
// round ticks. Lines are drawn as given: callers thin long series first.
std::string time_series_svg(const std::vector<ChartPanel>& panels, const std::string& x_label);

}  // namespace cnlab::sim
