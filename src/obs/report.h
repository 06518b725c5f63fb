// The run report: one self-contained HTML page drawn from one or more runs as obs/run_reader.h reads
// them: inline SVG charts (obs/svg_chart.h) with the runs overlaid (one colour each), a summary table,
// each run's events and its resolved configuration. No script, no external font, style sheet or
// image: the page opens anywhere, offline. Every text that comes from a run is escaped. The page is
// at most as wide as the window: a summary wider than that scrolls sideways inside its own box.
#pragma once

#include <string>
#include <vector>

#include "obs/html_escape.h"
#include "obs/run_reader.h"

namespace llamatrain::obs {

struct ReportOptions {
  std::string title = "llamatrain runs";
  bool log_loss = false;  // the loss chart on a log axis (the gradient norm takes one when it spans 10x)
};

// The HTML page. Each curve is an SVG <path class="curve" data-run="LABEL" data-metric="KEY"
// data-points="N"> with one point per logged step (N of them; a curve of more than 2400 is drawn as
// its envelope, one column of points per pixel, and says how many it draws in data-drawn); a chart's
// legend names every run drawn on it.
std::string render_report(const std::vector<RunData>& runs, const ReportOptions& options = {});

// The run's colour in the charts and the summary ("#1f77b4"); index mod the palette's size.
std::string run_colour(size_t index);

}  // namespace llamatrain::obs
