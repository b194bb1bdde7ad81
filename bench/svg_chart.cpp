// SVG rendering of the report's charts: axes with readable ticks, a legend on the right, one
// <g class="series"> per series. Sizes are fixed; the charts are for reading, not for print.
#include "bench/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

namespace edb::bench {

namespace {

constexpr double kWidth = 820, kHeight = 460;
constexpr double kLeft = 80, kRight = 230, kTop = 44, kBottom = 110;
constexpr double kPlotWidth = kWidth - kLeft - kRight, kPlotHeight = kHeight - kTop - kBottom;

// Distinct enough for a dozen series (Tableau 10 plus two).
const char* colour(size_t i) {
  static const char* palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
                                  "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#17becf", "#000000"};
  return palette[i % (sizeof palette / sizeof palette[0])];
}

const char* dash(size_t i) {  // after the palette wraps, lines differ by dashing too
  static const char* dashes[] = {"", "6,3", "2,3", "8,3,2,3"};
  return dashes[(i / 12) % 4];
}

std::string number(double v) {
  char text[32];
  if (v != 0 && (std::fabs(v) >= 1e6 || std::fabs(v) < 1e-3)) std::snprintf(text, sizeof text, "%.3g", v);
  else std::snprintf(text, sizeof text, "%.4g", v);
  return text;
}

std::string coordinate(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", v);
  return text;
}

// Ticks at 1, 2 or 5 times a power of ten, about `count` of them over [low, high].
std::vector<double> linear_ticks(double low, double high, int count) {
  const double span = high > low ? high - low : 1.0;
  const double raw = span / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) {
      step = m * power;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(low / step) * step; t <= high + step * 1e-9; t += step) ticks.push_back(std::fabs(t) < step * 1e-9 ? 0 : t);
  return ticks;
}

// Powers of ten within [low, high]; with fewer than three, also 2x and 5x.
std::vector<double> log_ticks(double low, double high) {
  std::vector<double> ticks;
  const int first = int(std::floor(std::log10(low))), last = int(std::ceil(std::log10(high)));
  const bool fine = last - first < 3;
  for (int p = first; p <= last; ++p)
    for (double m : {1.0, 2.0, 5.0}) {
      if (m != 1.0 && !fine) continue;
      const double t = m * std::pow(10.0, p);
      if (t >= low * (1 - 1e-9) && t <= high * (1 + 1e-9)) ticks.push_back(t);
    }
  return ticks;
}

struct Axis {
  double low = 0, high = 1;
  bool log = false;
  double position(double v, double length) const {  // 0..length along the axis
    const double a = log ? std::log10(low) : low, b = log ? std::log10(high) : high;
    const double x = log ? std::log10(v) : v;
    return b > a ? (x - a) / (b - a) * length : length / 2;
  }
};

// Extends [low, high] a little so points do not sit on the frame; on a log axis, by a factor.
Axis make_axis(double low, double high, bool log, bool from_zero) {
  Axis axis;
  axis.log = log;
  if (log) {
    if (!(high > low)) {
      low /= 2;
      high *= 2;
    }
    axis.low = low / 1.15;
    axis.high = high * 1.15;
  } else {
    if (from_zero) low = std::min(low, 0.0);
    if (!(high > low)) high = low + 1;
    const double pad = (high - low) * 0.05;
    axis.low = from_zero && low >= 0 ? low : low - pad;
    axis.high = high + pad;
  }
  return axis;
}

void open_svg(std::ostringstream& out, const std::string& title) {
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
      << "\" viewBox=\"0 0 " << kWidth << ' ' << kHeight << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<title>" << xml_escape(title) << "</title>\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << kWidth / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" << xml_escape(title)
      << "</text>\n";
}

void frame_and_y_axis(std::ostringstream& out, const Axis& y, const std::vector<double>& ticks, const std::string& label) {
  out << "<g class=\"axes\" stroke=\"#333\" fill=\"none\">\n<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\""
      << kPlotWidth << "\" height=\"" << kPlotHeight << "\"/>\n</g>\n<g class=\"y-ticks\">\n";
  for (double t : ticks) {
    const std::string py = coordinate(kTop + kPlotHeight - y.position(t, kPlotHeight));
    out << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + kPlotWidth << "\" y1=\"" << py << "\" y2=\"" << py
        << "\" stroke=\"#ddd\"/>\n<text x=\"" << kLeft - 6 << "\" y=\"" << py
        << "\" text-anchor=\"end\" dominant-baseline=\"middle\">" << number(t) << "</text>\n";
  }
  out << "</g>\n<text transform=\"translate(18," << kTop + kPlotHeight / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
      << xml_escape(label) << "</text>\n";
}

void legend(std::ostringstream& out, const std::vector<std::string>& names, bool lines) {
  out << "<g class=\"legend\">\n";
  const double x = kLeft + kPlotWidth + 16;
  for (size_t i = 0; i < names.size(); ++i) {
    const double y = kTop + 8 + 18.0 * double(i);
    if (lines)
      out << "<line x1=\"" << x << "\" x2=\"" << x + 22 << "\" y1=\"" << y << "\" y2=\"" << y << "\" stroke=\""
          << colour(i) << "\" stroke-width=\"2\" stroke-dasharray=\"" << dash(i) << "\"/>\n";
    else
      out << "<rect x=\"" << x << "\" y=\"" << y - 6 << "\" width=\"22\" height=\"12\" fill=\"" << colour(i) << "\"/>\n";
    out << "<text x=\"" << x + 28 << "\" y=\"" << y << "\" dominant-baseline=\"middle\">" << xml_escape(names[i])
        << "</text>\n";
  }
  out << "</g>\n";
}

}  // namespace

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  return out;
}

std::string render_line_chart(const LineChart& chart) {
  auto usable = [&](const std::pair<double, double>& p) {
    return std::isfinite(p.first) && std::isfinite(p.second) && (!chart.log_x || p.first > 0) &&
           (!chart.log_y || p.second > 0);
  };
  double x_low = INFINITY, x_high = -INFINITY, y_low = INFINITY, y_high = -INFINITY;
  std::set<double> xs;
  for (const LineSeries& s : chart.series)
    for (const auto& p : s.points)
      if (usable(p)) {
        x_low = std::min(x_low, p.first), x_high = std::max(x_high, p.first);
        y_low = std::min(y_low, p.second), y_high = std::max(y_high, p.second);
        xs.insert(p.first);
      }
  if (xs.empty()) x_low = y_low = 1, x_high = y_high = 10;
  const Axis x = make_axis(x_low, x_high, chart.log_x, false);
  const Axis y = make_axis(y_low, y_high, chart.log_y, true);

  std::ostringstream out;
  open_svg(out, chart.title);
  frame_and_y_axis(out, y, y.log ? log_ticks(y.low, y.high) : linear_ticks(y.low, y.high, 6), chart.y_label);
  // x ticks: the data's own x values when there are few (batch sizes), else regular ones.
  std::vector<double> x_ticks(xs.begin(), xs.end());
  if (x_ticks.size() > 12) x_ticks = x.log ? log_ticks(x.low, x.high) : linear_ticks(x.low, x.high, 8);
  out << "<g class=\"x-ticks\">\n";
  for (double t : x_ticks) {
    const std::string px = coordinate(kLeft + x.position(t, kPlotWidth));
    out << "<line x1=\"" << px << "\" x2=\"" << px << "\" y1=\"" << kTop << "\" y2=\"" << kTop + kPlotHeight
        << "\" stroke=\"#eee\"/>\n<text x=\"" << px << "\" y=\"" << kTop + kPlotHeight + 18
        << "\" text-anchor=\"middle\">" << number(t) << "</text>\n";
  }
  out << "</g>\n<text x=\"" << kLeft + kPlotWidth / 2 << "\" y=\"" << kTop + kPlotHeight + 44
      << "\" text-anchor=\"middle\">" << xml_escape(chart.x_label) << "</text>\n";

  std::vector<std::string> names;
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const LineSeries& s = chart.series[i];
    names.push_back(s.name);
    std::vector<std::pair<double, double>> points;
    for (const auto& p : s.points)
      if (usable(p)) points.push_back(p);
    std::sort(points.begin(), points.end());
    out << "<g class=\"series\" data-series=\"" << xml_escape(s.name) << "\" stroke=\"" << colour(i) << "\" fill=\""
        << colour(i) << "\">\n";
    if (points.size() > 1) {
      out << "<polyline fill=\"none\" stroke-width=\"2\" stroke-dasharray=\"" << dash(i) << "\" points=\"";
      for (size_t k = 0; k < points.size(); ++k)
        out << (k ? " " : "") << coordinate(kLeft + x.position(points[k].first, kPlotWidth)) << ','
            << coordinate(kTop + kPlotHeight - y.position(points[k].second, kPlotHeight));
      out << "\"/>\n";
    }
    for (const auto& p : points)
      out << "<circle cx=\"" << coordinate(kLeft + x.position(p.first, kPlotWidth)) << "\" cy=\""
          << coordinate(kTop + kPlotHeight - y.position(p.second, kPlotHeight)) << "\" r=\"3\"><title>"
          << xml_escape(s.name) << ": " << number(p.first) << ", " << number(p.second) << "</title></circle>\n";
    out << "</g>\n";
  }
  legend(out, names, true);
  out << "</svg>\n";
  return out.str();
}

std::string render_bar_chart(const BarChart& chart) {
  double y_high = chart.reference_line > 0 ? chart.reference_line : 0;
  for (const auto& row : chart.values) {
    double sum = 0;
    for (double v : row)
      if (std::isfinite(v) && v > 0) {
        sum += v;
        y_high = std::max(y_high, v);
      }
    if (chart.stacked) y_high = std::max(y_high, sum);
  }
  const Axis y = make_axis(0, y_high > 0 ? y_high : 1, false, true);

  std::ostringstream out;
  open_svg(out, chart.title);
  frame_and_y_axis(out, y, linear_ticks(y.low, y.high, 6), chart.y_label);
  const size_t group_count = std::max<size_t>(1, chart.groups.size());
  const double group_width = kPlotWidth / double(group_count);
  const bool rotate = chart.groups.size() > 6;
  out << "<g class=\"x-ticks\">\n";
  for (size_t g = 0; g < chart.groups.size(); ++g) {
    const double px = kLeft + group_width * (double(g) + 0.5), py = kTop + kPlotHeight + 16;
    out << "<text x=\"" << coordinate(px) << "\" y=\"" << py << "\" text-anchor=\"" << (rotate ? "end" : "middle") << '"';
    if (rotate) out << " transform=\"rotate(-45 " << coordinate(px) << ' ' << py << ")\"";
    out << '>' << xml_escape(chart.groups[g]) << "</text>\n";
  }
  out << "</g>\n";

  const double series_count = double(std::max<size_t>(1, chart.series.size()));
  const double bar_width = chart.stacked ? group_width * 0.6 : group_width * 0.8 / series_count;
  std::vector<double> stacked_top(chart.groups.size(), 0.0);
  for (size_t s = 0; s < chart.series.size(); ++s) {
    out << "<g class=\"series\" data-series=\"" << xml_escape(chart.series[s]) << "\" fill=\"" << colour(s) << "\">\n";
    for (size_t g = 0; g < chart.groups.size() && g < chart.values.size(); ++g) {
      const double v = s < chart.values[g].size() ? chart.values[g][s] : NAN;
      if (!std::isfinite(v) || v <= 0) continue;
      const double base = chart.stacked ? stacked_top[g] : 0;
      const double x0 = kLeft + group_width * double(g) +
                        (chart.stacked ? group_width * 0.2 : group_width * 0.1 + bar_width * double(s));
      const double top = kTop + kPlotHeight - y.position(base + v, kPlotHeight);
      const double bottom = kTop + kPlotHeight - y.position(base, kPlotHeight);
      out << "<rect x=\"" << coordinate(x0) << "\" y=\"" << coordinate(top) << "\" width=\"" << coordinate(bar_width)
          << "\" height=\"" << coordinate(std::max(0.0, bottom - top)) << "\"><title>" << xml_escape(chart.groups[g])
          << ", " << xml_escape(chart.series[s]) << ": " << number(v) << "</title></rect>\n";
      if (chart.stacked) stacked_top[g] += v;
    }
    out << "</g>\n";
  }
  if (chart.reference_line > 0) {
    const std::string py = coordinate(kTop + kPlotHeight - y.position(chart.reference_line, kPlotHeight));
    out << "<line class=\"reference\" x1=\"" << kLeft << "\" x2=\"" << kLeft + kPlotWidth << "\" y1=\"" << py
        << "\" y2=\"" << py << "\" stroke=\"#333\" stroke-dasharray=\"5,4\"/>\n";
  }
  legend(out, chart.series, false);
  out << "</svg>\n";
  return out.str();
}

}  // namespace edb::bench
