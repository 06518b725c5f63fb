// Text made safe for HTML and SVG: the run report's page (obs/report.h) and its charts
// (obs/svg_chart.h) escape every text that comes from a run or a user through this one function.
#pragma once

#include <string>

namespace llamatrain::obs {

// &, <, >, " and ' as HTML entities: safe in text and in quoted attributes.
std::string html_escape(const std::string& text);

}  // namespace llamatrain::obs
