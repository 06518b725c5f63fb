// An SVG line chart that knows nothing of runs: named curves of (step, value) points in a fixed
// coordinate space (viewBox 640x330, scaled by the page's style sheet), a linear or log value axis
// with ticks at 1/2/5 x 10^k, a legend above the plot and markers at given steps. A value that is not
// finite (or not positive on a log axis) leaves a gap; a curve of more than 2400 points is drawn as
// its envelope, one column of points per pixel, so the page stays of bounded size. Every text given
// here is escaped here. No script: hover texts are SVG <title> elements.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace llamatrain::obs {

// How a value is written, in tick labels, hover texts and the report's tables.
enum class Unit { kPlain, kRate, kPercent, kBytes, kSeconds };

// "2.31", "1.20e-04", "12.3k", "31.0%", "2.75 GB", "0.5s", "3m05s"; "&#8212;" (a dash) when not finite.
std::string format_value(double v, Unit unit);

// The value axis: linear, log when the values span 10x or more, or log whenever every value is positive.
enum class LogAxis { kNever, kWhenSpans10x, kAlways };

struct ChartCurve {
  std::string name;                                   // its series (data-run), as in the legend
  std::string metric;                                 // data-metric
  std::string colour;                                 // "#1f77b4"
  const std::map<int64_t, double>* points = nullptr;  // step -> value; NaN: a gap
  bool dashed = false;                                // dashed, with a dot at each point
};

enum class MarkerShape { kTriangle, kCross, kDashedLine, kRing };

// A mark at a step, over the curves: a triangle or a ring at the bottom of the plot, a cross above
// it, or a dashed line from top to bottom.
struct ChartMarker {
  std::string kind;  // data-kind
  int64_t step = 0;
  MarkerShape shape = MarkerShape::kTriangle;
  std::string colour;
  std::string tip;  // the hover text
};

struct LegendEntry {
  std::string label;  // cut to 30 characters
  std::string colour;
};

struct Chart {
  std::string metric;  // the figure's data-metric
  std::string title;
  Unit unit = Unit::kPlain;
  LogAxis log = LogAxis::kNever;
  std::vector<LegendEntry> legend;
  std::vector<ChartCurve> curves;
  std::vector<ChartMarker> markers;  // those outside the curves' step range are left out
  std::string caption_html;          // a <figcaption>, markup as given, when not empty
};

// <figure class="chart" data-metric="METRIC"><svg ...>...</svg></figure> and a newline; "" when no
// curve has a point to draw. Each curve is <path class="curve" data-run="NAME" data-metric="METRIC"
// data-points="N" d="..."> with N its finite points; an envelope adds data-drawn="POINTS DRAWN".
std::string render_svg_chart(const Chart& chart);

}  // namespace llamatrain::obs
