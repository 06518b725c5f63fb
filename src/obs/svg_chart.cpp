// The SVG line chart (obs/svg_chart.h): ranges over the finite values, nice ticks, a legend laid out
// in rows above the plot, then the grid, the curves (thinned to their per-pixel envelope when long) and
// the markers, in that order, so that curves lie over the grid and markers over the curves.
#include "obs/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "obs/html_escape.h"
#include "obs/progress.h"

namespace llamatrain::obs {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A tick label: as few digits as the tick spacing needs.
std::string tick_label(double v, double spacing, Unit unit, bool log) {
  if (v == 0) return "0";
  if (unit == Unit::kBytes) return format_bytes(v);
  if (unit == Unit::kRate) return format_rate(v);
  if (unit == Unit::kPercent) v *= 100, spacing *= 100;
  std::string s;
  if (v == 0)
    s = "0";
  else if (log || std::fabs(v) < 1e-3 || std::fabs(v) >= 1e6)
    s = fmt::format("{:g}", v);
  else
    s = fmt::format("{:.{}f}", v, std::max(0, int(-std::floor(std::log10(spacing) + 1e-9))));
  return unit == Unit::kPercent ? s + "%" : unit == Unit::kSeconds ? s + "s" : s;
}

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double unit(double v) const {
    return log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) : (v - lo) / (hi - lo);
  }
};

double nice_spacing(double span, int target) {
  const double raw = span / target, mag = std::pow(10.0, std::floor(std::log10(raw))), norm = raw / mag;
  return mag * (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10);
}

std::vector<double> linear_ticks(double lo, double hi, int target, double* spacing) {
  *spacing = nice_spacing(hi - lo, target);
  std::vector<double> ticks;
  const double first = std::ceil(lo / *spacing - 1e-9);
  for (int i = 0; first + i <= std::floor(hi / *spacing + 1e-9); i++) {
    const double v = (first + i) * *spacing;
    ticks.push_back(std::fabs(v) < *spacing * 1e-9 ? 0.0 : v);
  }
  return ticks;
}

std::vector<double> log_ticks(double lo, double hi) {
  for (const std::vector<double>& mantissas : {std::vector<double>{1}, {1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
    std::vector<double> ticks;
    for (int e = int(std::floor(std::log10(lo))); e <= int(std::ceil(std::log10(hi))); e++)
      for (double m : mantissas) {
        const double v = m * std::pow(10.0, e);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks.push_back(v);
      }
    if (ticks.size() >= 3 || mantissas.size() == 9) return ticks;
  }
  return {};
}

// Layout of one chart in SVG units.
constexpr double kWidth = 640, kHeight = 330, kLeft = 72, kRight = 18, kBottom = 46;
constexpr int64_t kMaxDrawn = 2400;  // points of a curve drawn as they are; more are thinned by envelope()

// Per column (column(step), non-decreasing along pts): the first, lowest, highest and last finite point
// in step order; gaps (NaN) are kept.
template <typename Column>
std::vector<std::pair<double, double>> envelope(const std::vector<std::pair<double, double>>& pts, Column column) {
  std::vector<std::pair<double, double>> out;
  for (size_t i = 0; i < pts.size();) {
    if (!std::isfinite(pts[i].second)) {
      out.push_back(pts[i++]);
      continue;
    }
    size_t j = i, lo = i, hi = i;
    const int64_t col = column(pts[i].first);
    for (; j < pts.size() && std::isfinite(pts[j].second) && column(pts[j].first) == col; j++) {
      if (pts[j].second < pts[lo].second) lo = j;
      if (pts[j].second > pts[hi].second) hi = j;
    }
    std::set<size_t> keep = {i, lo, hi, j - 1};
    for (size_t k : keep) out.push_back(pts[k]);
    i = j;
  }
  return out;
}

void svg_text(std::string& out, double x, double y, const std::string& anchor, const std::string& cls,
              const std::string& escaped) {
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" class=\"{}\">{}</text>", x, y, anchor, cls,
                     escaped);
}

std::string truncate_label(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n - 1) + "~"; }

// The extent of every finite value (and the lowest positive one, the low end of a log axis).
struct Extent {
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY, ypos = INFINITY;
};

Extent extent_of(const std::vector<ChartCurve>& curves) {
  Extent e;
  for (const auto& c : curves)
    for (const auto& [step, v] : *c.points) {
      if (!std::isfinite(v)) continue;
      e.xmin = std::min(e.xmin, double(step)), e.xmax = std::max(e.xmax, double(step));
      e.ymin = std::min(e.ymin, v), e.ymax = std::max(e.ymax, v);
      if (v > 0) e.ypos = std::min(e.ypos, v);
    }
  return e;
}

// The value axis: log as `log` allows (every value positive), else linear with a margin.
Axis value_axis(const Extent& e, LogAxis log) {
  Axis y{e.ymin, e.ymax, false};
  y.log = log != LogAxis::kNever && e.ymin > 0 && (e.ymax / e.ymin >= 10 || log == LogAxis::kAlways);
  if (y.log) {
    y.lo = e.ypos / 1.15, y.hi = e.ymax * 1.15;
    return y;
  }
  // A flat curve (memory, a constant lr) gets a span of 4% of its value, so the ticks read apart.
  const double floor_span = 0.04 * std::max(std::fabs(e.ymin), std::fabs(e.ymax));
  const double pad = e.ymax - e.ymin >= floor_span && e.ymax > e.ymin ? 0.06 * (e.ymax - e.ymin)
                     : floor_span > 0                                 ? (floor_span - (e.ymax - e.ymin)) / 2
                                                                      : 1.0;
  y.lo = e.ymin - pad, y.hi = e.ymax + pad;
  if (e.ymin >= 0 && y.lo < 0) y.lo = 0;
  return y;
}

// The plot's rectangle in SVG units and the axes that map (step, value) into it.
struct Plot {
  Axis x, y;
  double top = 0, width = 0, height = 0;
  double px(double step) const { return kLeft + x.unit(step) * width; }
  double py(double v) const { return top + (1 - y.unit(v)) * height; }
  double bottom() const { return top + height; }
};

struct PlacedEntry {
  const LegendEntry* entry;
  double x, y;
};

// Legend entries left to right in rows above the plot, a new row where one would pass the right edge.
std::vector<PlacedEntry> place_legend(const std::vector<LegendEntry>& legend) {
  std::vector<PlacedEntry> placed;
  double lx = kLeft, ly = 44;
  for (const auto& entry : legend) {
    const double w = 30 + 6.6 * double(truncate_label(entry.label, 30).size());
    if (lx + w > kWidth - kRight && lx > kLeft) lx = kLeft, ly += 17;
    placed.push_back({&entry, lx, ly});
    lx += w + 12;
  }
  return placed;
}

void draw_legend(std::string& out, const std::vector<PlacedEntry>& placed) {
  out += "<g class=\"legend\">";
  for (const auto& e : placed)
    out += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" "
                       "stroke-width=\"3\"/><text x=\"{4:.1f}\" y=\"{5:.1f}\" class=\"legend-label\">{6}</text>",
                       e.x, e.y - 4, e.x + 22, e.entry->colour, e.x + 27, e.y,
                       html_escape(truncate_label(e.entry->label, 30)));
  out += "</g>";
}

// The plot's frame, a grid line and a label at each tick of both axes, and the step axis' name.
void draw_grid(std::string& out, const Plot& plot, Unit unit) {
  out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" class=\"plot\"/>", kLeft,
                     plot.top, plot.width, plot.height);
  double yspacing = 0, xspacing = 0;
  const Axis& y = plot.y;
  const std::vector<double> yt = y.log ? log_ticks(y.lo, y.hi) : linear_ticks(y.lo, y.hi, 5, &yspacing);
  for (double v : yt) {
    out += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" class=\"grid\"/>", kLeft,
                       plot.py(v), kLeft + plot.width, plot.py(v));
    svg_text(out, kLeft - 6, plot.py(v) + 4, "end", "tick", html_escape(tick_label(v, yspacing, unit, y.log)));
  }
  for (double v : linear_ticks(plot.x.lo, plot.x.hi, 6, &xspacing)) {
    if (xspacing < 1 && v != std::floor(v)) continue;
    out += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" class=\"grid\"/>", plot.px(v),
                       plot.top, plot.bottom());
    svg_text(out, plot.px(v), plot.bottom() + 16, "middle", "tick", format_count(v));
  }
  svg_text(out, kLeft + plot.width / 2, kHeight - 8, "middle", "axis-label", "step");
}

// One curve: one point per step, a gap where a value is not finite (or not positive on a log axis).
// A curve of more points than the plot has room for keeps, per pixel column, the first, lowest,
// highest and last point: the same envelope. A curve of one point, or a dashed one, also gets a dot
// (with its value as the hover text) at each point.
void draw_curve(std::string& out, const ChartCurve& c, const Plot& plot, Unit unit) {
  const bool log = plot.y.log;
  std::vector<std::pair<double, double>> pts;  // (step, value); NaN value: a gap
  for (const auto& [step, v] : *c.points)
    pts.emplace_back(double(step), std::isfinite(v) && !(log && v <= 0) ? v : kNaN);
  const int64_t n = std::count_if(pts.begin(), pts.end(), [](const auto& p) { return std::isfinite(p.second); });
  if (n == 0) return;
  if (n > kMaxDrawn) pts = envelope(pts, [&](double step) { return int64_t(plot.px(step) - kLeft); });
  std::string d;
  int64_t drawn = 0;
  bool pen_down = false;
  for (const auto& [step, v] : pts) {
    if (!std::isfinite(v)) {
      pen_down = false;
      continue;
    }
    d += fmt::format("{}{:.1f},{:.1f} ", pen_down ? 'L' : 'M', plot.px(step), plot.py(v));
    pen_down = true;
    drawn++;
  }
  d.pop_back();
  out += fmt::format("<path class=\"curve\" data-run=\"{}\" data-metric=\"{}\" data-points=\"{}\" d=\"{}\"{} "
                     "stroke=\"{}\"{}/>",
                     html_escape(c.name), html_escape(c.metric), n, d,
                     drawn == n ? "" : fmt::format(" data-drawn=\"{}\"", drawn), c.colour,
                     c.dashed ? " stroke-dasharray=\"6 4\"" : "");
  if (n == 1 || c.dashed)
    for (const auto& [step, v] : *c.points)
      if (std::isfinite(v) && !(log && v <= 0))
        out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\" class=\"point\"><title>{} "
                           "step {}: {} {}</title></circle>",
                           plot.px(double(step)), plot.py(v), c.colour, html_escape(c.name), step,
                           html_escape(c.metric), format_value(v, unit));
}

void draw_marker(std::string& out, const ChartMarker& m, const Plot& plot) {
  const double ex = plot.px(double(m.step)), base = plot.bottom();
  const std::string tip = "<title>" + html_escape(m.tip) + "</title>";
  const std::string kind = html_escape(m.kind);
  switch (m.shape) {
    case MarkerShape::kTriangle:
      out +=
          fmt::format("<path class=\"marker\" data-kind=\"{}\" d=\"M{:.1f},{:.1f} l-5,-9 h10 z\" fill=\"{}\">{}</path>",
                      kind, ex, base - 2, m.colour, tip);
      break;
    case MarkerShape::kCross:
      out += fmt::format("<path class=\"marker\" data-kind=\"{0}\" d=\"M{1:.1f},{2:.1f} l8,8 m0,-8 l-8,8\" "
                         "stroke=\"{3}\" stroke-width=\"2\">{4}</path>",
                         kind, ex - 4, base - 12, m.colour, tip);
      break;
    case MarkerShape::kDashedLine:
      out += fmt::format("<line class=\"marker\" data-kind=\"{}\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" "
                         "y2=\"{:.1f}\" stroke=\"{}\" stroke-dasharray=\"3 3\" stroke-width=\"1.5\">{}</line>",
                         kind, ex, plot.top, ex, base, m.colour, tip);
      break;
    case MarkerShape::kRing:
      out += fmt::format("<circle class=\"marker\" data-kind=\"{}\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" "
                         "fill=\"none\" stroke=\"{}\">{}</circle>",
                         kind, ex, base - 6, m.colour, tip);
      break;
  }
}

}  // namespace

std::string format_value(double v, Unit unit) {
  if (!std::isfinite(v)) return "&#8212;";
  switch (unit) {
    case Unit::kRate: return format_rate(std::fabs(v));
    case Unit::kPercent: return fmt::format("{:.1f}%", 100 * v);
    case Unit::kBytes: return format_bytes(v);
    case Unit::kSeconds: return v < 1 ? fmt::format("{:.3g}s", v) : format_duration(v);
    case Unit::kPlain: break;
  }
  if (v != 0 && (std::fabs(v) < 1e-2 || std::fabs(v) >= 1e6)) return fmt::format("{:.2e}", v);
  return fmt::format("{:.4g}", v);
}

std::string render_svg_chart(const Chart& chart) {
  const Extent e = extent_of(chart.curves);
  if (!std::isfinite(e.xmin)) return "";
  Plot plot;
  plot.x = Axis{e.xmin, e.xmax, false};
  if (plot.x.hi == plot.x.lo) plot.x.lo -= 1, plot.x.hi += 1;
  plot.y = value_axis(e, chart.log);
  const std::vector<PlacedEntry> legend = place_legend(chart.legend);
  plot.top = (legend.empty() ? 44 : legend.back().y) + 14;
  plot.width = kWidth - kLeft - kRight;
  plot.height = kHeight - plot.top - kBottom;

  std::string out = fmt::format(
      "<figure class=\"chart\" data-metric=\"{0}\"><svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {1} {2}\" "
      "role=\"img\" aria-label=\"{3}\">",
      html_escape(chart.metric), kWidth, kHeight, html_escape(chart.title));
  svg_text(out, kLeft, 22, "start", "title", html_escape(chart.title) + (plot.y.log ? " (log scale)" : ""));
  draw_legend(out, legend);
  draw_grid(out, plot, chart.unit);
  for (const auto& c : chart.curves) draw_curve(out, c, plot, chart.unit);
  for (const auto& m : chart.markers)
    if (double(m.step) >= plot.x.lo && double(m.step) <= plot.x.hi) draw_marker(out, m, plot);
  out += "</svg>";
  if (!chart.caption_html.empty()) out += "<figcaption>" + chart.caption_html + "</figcaption>";
  return out + "</figure>\n";
}

}  // namespace llamatrain::obs
