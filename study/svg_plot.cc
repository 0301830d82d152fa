// SVG plots for the comparison report (see svg_plot.h).
#include "study/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>

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

// The range of `values`, widened to the ticks just outside it (so every point
// lies within ticked axis), then padded a little so that markers on the edge
// stay inside the frame.
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
  a.lo = lo;
  a.hi = hi;
  if (a.log) {
    // Down and up to the nearest 1-2-5 tick.
    auto below = [](double t) {
      const double e = std::floor(t), m = std::pow(10.0, t - e);
      return e + std::log10(m >= 5 ? 5.0 : m >= 2 ? 2.0 : 1.0);
    };
    auto above = [](double t) {
      const double e = std::floor(t), m = std::pow(10.0, t - e);
      if (m <= 1 + 1e-9) return e;
      return m <= 2 + 1e-9   ? e + std::log10(2.0)
             : m <= 5 + 1e-9 ? e + std::log10(5.0)
                             : e + 1;
    };
    a.lo = below(lo + 1e-12);
    a.hi = above(hi - 1e-12);
  } else {
    const std::vector<double> t = Ticks(a);
    const double step = t.size() >= 2 ? t[1] - t[0] : (hi - lo);
    a.lo = std::floor(lo / step + 1e-9) * step;
    a.hi = std::ceil(hi / step - 1e-9) * step;
  }
  const double pad = 0.03 * (a.hi - a.lo);
  a.lo -= pad;
  a.hi += pad;
}

// A marker of `shape` centred at (x, y), radius about r.
std::string Marker(const std::string& shape, double x, double y, double r,
                   const char* color, bool hollow) {
  const std::string paint =
      hollow ? absl::StrFormat(
                   "fill=\"white\" stroke=\"%s\" stroke-width=\"2\"", color)
             : absl::StrFormat("fill=\"%s\"", color);
  if (shape == "square") {
    return absl::StrFormat(
        "<rect class=\"marker\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
        "height=\"%.1f\" %s>",
        x - r, y - r, 2 * r, 2 * r, paint);
  }
  if (shape == "triangle" || shape == "diamond") {
    const std::string pts =
        shape == "triangle"
            ? absl::StrFormat("%.1f,%.1f %.1f,%.1f %.1f,%.1f", x, y - 1.2 * r,
                              x + 1.1 * r, y + 0.8 * r, x - 1.1 * r,
                              y + 0.8 * r)
            : absl::StrFormat("%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f", x,
                              y - 1.3 * r, x + 1.3 * r, y, x, y + 1.3 * r,
                              x - 1.3 * r, y);
    return absl::StrFormat("<polygon class=\"marker\" points=\"%s\" %s>", pts,
                           paint);
  }
  return absl::StrFormat(
      "<circle class=\"marker\" cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" %s>", x, y,
      r, paint);
}

std::string MarkerEnd(const std::string& shape) {
  return shape == "square"                           ? "</rect>"
         : shape == "triangle" || shape == "diamond" ? "</polygon>"
                                                     : "</circle>";
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

namespace {

// Fits both axes to every valid point and error bar of `series`.
void FitAxes(const std::vector<PlotSeries>& series, Axis& x, Axis& y) {
  std::vector<double> xs, ys;
  for (const auto& s : series) {
    for (size_t i = 0; i < s.points.size(); ++i) {
      const auto [px, py] = s.points[i];
      if (!x.Valid(px) || !y.Valid(py)) continue;
      xs.push_back(px);
      ys.push_back(py);
      if (i < s.y_error.size()) {
        for (double e : {s.y_error[i].first, s.y_error[i].second}) {
          if (y.Valid(e)) ys.push_back(e);
        }
      }
    }
  }
  Fit(x, xs);
  Fit(y, ys);
}

}  // namespace

std::string RenderSvgPlot(const PlotOptions& o,
                          const std::vector<PlotSeries>& series) {
  Axis x{o.log_x}, y{o.log_y};
  FitAxes(series, x, y);
  const double left = 70, right = 270, top = 36, bottom = 52;
  const double pw = o.width - left - right, ph = o.height - top - bottom;
  auto sx = [&](double v) {
    return left + (x.T(v) - x.lo) / (x.hi - x.lo) * pw;
  };
  auto sy = [&](double v) {
    return top + ph - (y.T(v) - y.lo) / (y.hi - y.lo) * ph;
  };
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"100%%\" "
      "viewBox=\"0 0 %d %d\" preserveAspectRatio=\"xMinYMin meet\" "
      "font-family=\"sans-serif\" font-size=\"12\" role=\"img\" "
      "aria-label=\"%s\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%g\" y=\"20\" font-size=\"14\" "
      "font-weight=\"bold\">%s</text>\n",
      o.width, o.height, EscapeXml(o.title), left, EscapeXml(o.title));
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
  // Points that land on one spot (within 4 px) are spread 7 px apart sideways.
  std::map<std::pair<int, int>, int> taken;
  int index = 0;
  for (const auto& s : series) {
    const char* color = kColors[(s.color >= 0 ? s.color : index) % kNumColors];
    std::string pts, marks;
    for (size_t i = 0; i < s.points.size(); ++i) {
      const auto [px, py] = s.points[i];
      if (!x.Valid(px) || !y.Valid(py)) continue;
      double cx = sx(px);
      const double cy = sy(py);
      const int n =
          taken[{static_cast<int>(cx / 4), static_cast<int>(cy / 4)}]++;
      cx += 7.0 * ((n + 1) / 2) * (n % 2 == 1 ? 1 : -1);
      absl::StrAppendFormat(&pts, "%.1f,%.1f ", cx, cy);
      if (i < s.y_error.size() && y.Valid(s.y_error[i].first) &&
          y.Valid(s.y_error[i].second)) {
        const double y0 = sy(s.y_error[i].first), y1 = sy(s.y_error[i].second);
        absl::StrAppendFormat(
            &marks,
            "<path class=\"error-bar\" d=\"M%.1f %.1fV%.1fM%.1f %.1fh8M%.1f "
            "%.1fh8\" stroke=\"%s\" stroke-width=\"1.5\" fill=\"none\"/>",
            cx, y0, y1, cx - 4, y0, cx - 4, y1, color);
      }
      absl::StrAppend(
          &marks, Marker(s.marker, cx, cy, 4.5, color, s.hollow),
          absl::StrFormat(
              "<title>%s: (%g, %g)%s</title>", EscapeXml(s.name), px, py,
              i < s.y_error.size()
                  ? absl::StrFormat(" range %g-%g", s.y_error[i].first,
                                    s.y_error[i].second)
                  : ""),
          MarkerEnd(s.marker));
      if (i < s.labels.size() && !s.labels[i].empty()) {
        absl::StrAppendFormat(
            &marks,
            "<text class=\"point-label\" x=\"%.1f\" y=\"%.1f\" "
            "font-size=\"10\" fill=\"%s\">%s</text>",
            cx + 7, cy - 6 - 10.0 * n, color, EscapeXml(s.labels[i]));
      }
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
    absl::StrAppend(&svg, "<g class=\"legend\">");
    if (s.line) {
      absl::StrAppendFormat(
          &svg,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
          "stroke=\"%s\" stroke-width=\"2\"%s/>",
          left + pw + 12, ly, left + pw + 36, ly, color,
          s.dashed ? " stroke-dasharray=\"6 4\"" : "");
    }
    absl::StrAppend(
        &svg, Marker(s.marker, left + pw + 24, ly, 4.5, color, s.hollow),
        MarkerEnd(s.marker),
        absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\">%s</text></g>\n",
                        left + pw + 42, ly + 4, EscapeXml(s.name)));
    ++index;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace lrkv
