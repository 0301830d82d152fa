// Small self-contained SVG line/scatter plots for the comparison report: axes
// with ticks (linear or logarithmic), a grid, one polyline with markers per
// series, and a legend. No JavaScript and no external files, so the report
// opens anywhere.
#ifndef LRKV_STUDY_SVG_PLOT_H_
#define LRKV_STUDY_SVG_PLOT_H_

#include <string>
#include <utility>
#include <vector>

namespace lrkv {

struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>>
      points;  // (x, y), drawn in the order given
  bool dashed = false;
  bool line = true;  // false: markers only
  // Palette index; series that belong together (a variant before and after
  // healing, a variant in every plot) share one. -1: the series' own position.
  int color = -1;
  // The marker: "circle", "square", "triangle" or "diamond"; hollow draws its outline
  // only (converted vs healed read apart without the lines).
  std::string marker = "circle";
  bool hollow = false;
  // Optional, one per point: a short label drawn beside it, and the (low, high) of an
  // error bar through it (min–max of timed steps).
  std::vector<std::string> labels;
  std::vector<std::pair<double, double>> y_error;
};

struct PlotOptions {
  std::string title, x_label, y_label;
  bool log_x = false, log_y = false;
  int width = 760, height = 420;
};

// The axes span every drawable point and its error bar, out to the ticks beyond them
// (no point lies past the last tick). Points that fall on the same spot are spread
// sideways a few pixels so that each stays visible. The SVG scales to its container's
// width. Points with non-finite coordinates (or non-positive ones on a log axis) are
// skipped.
std::string RenderSvgPlot(const PlotOptions& options,
                          const std::vector<PlotSeries>& series);

// Escapes &, <, >, " for HTML/SVG text and attributes.
std::string EscapeXml(const std::string& text);

}  // namespace lrkv

#endif  // LRKV_STUDY_SVG_PLOT_H_
