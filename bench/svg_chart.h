// Small SVG charts for the benchmark report (line charts and grouped or stacked bar charts), with
// no dependency beyond the standard library. Each series is a <g class="series" data-series=NAME>
// so a reader (or a test) can find it; colours come from a fixed palette, in series order.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace edb::bench {

struct LineSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y); drawn in x order
};

struct LineChart {
  std::string title, x_label, y_label;
  bool log_x = false, log_y = false;  // log scales need positive values; others are left out
  std::vector<LineSeries> series;
};

// Bars: one group per label, one bar per series in each group (side by side), or the series
// stacked in one bar per group when `stacked`.
struct BarChart {
  std::string title, y_label;
  std::vector<std::string> series;
  std::vector<std::string> groups;
  std::vector<std::vector<double>> values;  // values[group][series]
  bool stacked = false;
  double reference_line = 0;  // drawn as a dashed horizontal line when positive (e.g. 1 for batches/LB)
};

std::string render_line_chart(const LineChart& chart);
std::string render_bar_chart(const BarChart& chart);

// Text safe inside an XML attribute or element.
std::string xml_escape(const std::string& text);

}  // namespace edb::bench
