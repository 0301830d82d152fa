// SVG plots for the comparison report (see svg_plot.h).
#include "study/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lrkv {
namespace {

// Colour-blind-safe palettes (Okabe-Ito, then Tol's muted), 16 colours.
constexpr const char* kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                   "#E69F00", "#56B4E9", "#000000", "#882255",
                                   "#44AA99", "#999933", "#332288", "#AA4499",
                                   "#117733", "#DDCC77", "#88CCEE", "#661100"};
constexpr int kNumColors = std::size(kColors);

struct Axis {
  bool log = false;
  double lo = 0, hi = 1;  // in transformed units
  double T(double v) const { return log ? std::log10(v) : v; }
  bool Valid(double v) const { return std::isfinite(v) && (!log || v > 0); }
};

// Ticks at 1-2-5 steps (linear) or at 1, 2, 5 × powers of ten (log).
std::vector<double> Ticks(const Axis& a) {
  std::vector<double> ticks;
  if (a.log) {
    for (int e = static_cast<int>(std::floor(a.lo));
         e <= static_cast<int>(std::ceil(a.hi)); ++e) {
      for (double m : {1.0, 2.0, 5.0}) {
        const double v = m * std::pow(10.0, e);
        if (std::log10(v) >= a.lo - 1e-9 && std::log10(v) <= a.hi + 1e-9)
          ticks.push_back(v);
      }
    }
    return ticks;
  }
  const double span = a.hi - a.lo;
  const double raw = span / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  for (double v = std::ceil(a.lo / step) * step; v <= a.hi + 1e-9 * span;
       v += step) {
    ticks.push_back(std::abs(v) < 1e-12 * step ? 0 : v);
  }
  return ticks;
}

std::string TickLabel(double v) {
  if (v != 0 && (std::abs(v) >= 1e5 || std::abs(v) < 1e-3))
    return absl::StrFormat("%.0e", v);
  return absl::StrFormat("%g", v);
}

void Fit(Axis& a, const std::vector<double>& values) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : values) {
    lo = std::min(lo, a.T(v));
    hi = std::max(hi, a.T(v));
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (hi - lo < 1e-12) {
    lo -= a.log ? 0.1 : std::max(1e-6, std::abs(lo) * 0.1);
    hi += a.log ? 0.1 : std::max(1e-6, std::abs(hi) * 0.1);
  }
  const double pad = 0.06 * (hi - lo);
  a.lo = lo - pad;
  a.hi = hi + pad;
}

}  // namespace

std::string EscapeXml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string RenderSvgPlot(const PlotOptions& o,
                          const std::vector<PlotSeries>& series) {
  Axis x{o.log_x}, y{o.log_y};
  std::vector<double> xs, ys;
  for (const auto& s : series) {
    for (const auto& [px, py] : s.points) {
      if (x.Valid(px) && y.Valid(py)) {
        xs.push_back(px);
        ys.push_back(py);
      }
    }
  }
  Fit(x, xs);
  Fit(y, ys);
  const double left = 70, right = 250, top = 36, bottom = 52;
  const double pw = o.width - left - right, ph = o.height - top - bottom;
  auto sx = [&](double v) {
    return left + (x.T(v) - x.lo) / (x.hi - x.lo) * pw;
  };
  auto sy = [&](double v) {
    return top + ph - (y.T(v) - y.lo) / (y.hi - y.lo) * ph;
  };
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "viewBox=\"0 0 %d %d\" "
      "font-family=\"sans-serif\" font-size=\"12\" role=\"img\" "
      "aria-label=\"%s\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%g\" y=\"20\" font-size=\"14\" "
      "font-weight=\"bold\">%s</text>\n",
      o.width, o.height, o.width, o.height, EscapeXml(o.title), left,
      EscapeXml(o.title));
  for (double t : Ticks(x)) {
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
        "stroke=\"#ddd\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
        sx(t), top, sx(t), top + ph, sx(t), top + ph + 16, TickLabel(t));
  }
  for (double t : Ticks(y)) {
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
        "stroke=\"#ddd\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
        left, sy(t), left + pw, sy(t), left - 6, sy(t) + 4, TickLabel(t));
  }
  absl::StrAppendFormat(
      &svg,
      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
      "fill=\"none\" stroke=\"#333\"/>\n"
      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n"
      "<text transform=\"translate(16,%.1f) rotate(-90)\" "
      "text-anchor=\"middle\">%s</text>\n",
      left, top, pw, ph, left + pw / 2, o.height - 12.0, EscapeXml(o.x_label),
      top + ph / 2, EscapeXml(o.y_label));
  int index = 0;
  for (const auto& s : series) {
    const char* color = kColors[(s.color >= 0 ? s.color : index) % kNumColors];
    std::string pts;
    std::string marks;
    for (const auto& [px, py] : s.points) {
      if (!x.Valid(px) || !y.Valid(py)) continue;
      absl::StrAppendFormat(&pts, "%.1f,%.1f ", sx(px), sy(py));
      absl::StrAppendFormat(
          &marks,
          "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>%s: "
          "(%g, %g)</title></circle>",
          sx(px), sy(py), color, EscapeXml(s.name), px, py);
    }
    absl::StrAppend(&svg, "<g class=\"series\" data-name=\"", EscapeXml(s.name),
                    "\">");
    if (s.line && !pts.empty()) {
      absl::StrAppendFormat(
          &svg,
          "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" "
          "stroke-width=\"2\"%s/>",
          pts, color, s.dashed ? " stroke-dasharray=\"6 4\"" : "");
    }
    absl::StrAppend(&svg, marks, "</g>\n");
    const double ly = top + 10 + 18 * index;
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
        "stroke-width=\"2\"%s/><circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" "
        "fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
        left + pw + 12, ly, left + pw + 36, ly, color,
        s.dashed ? " stroke-dasharray=\"6 4\"" : "", left + pw + 24, ly, color,
        left + pw + 42, ly + 4, EscapeXml(s.name));
    ++index;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace lrkv
