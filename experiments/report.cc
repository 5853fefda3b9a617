#include "zerorun/experiments/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "zerorun/core/error.h"
#include "zerorun/experiments/results.h"
#include "zerorun/experiments/search.h"

namespace zerorun::experiments {
namespace {

std::string Esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string F(double x, int prec = 4) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*g", prec, x);
  return buf;
}

// Colour of rank r of n (0 best): dark blue for the best through orange for the worst.
std::string RankColor(size_t r, size_t n) {
  double t = n <= 1 ? 0 : static_cast<double>(r) / static_cast<double>(n - 1);
  int red = static_cast<int>(30 + t * 210), green = static_cast<int>(70 + t * 90), blue = static_cast<int>(170 - t * 130);
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", red, green, blue);
  return buf;
}

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double Map(double v, double px_lo, double px_hi) const {
    double a = log ? std::log(lo) : lo, b = log ? std::log(hi) : hi, x = log ? std::log(std::max(v, 1e-300)) : v;
    double t = b > a ? (x - a) / (b - a) : 0.5;
    return px_lo + std::clamp(t, -0.05, 1.05) * (px_hi - px_lo);
  }
};

constexpr int kW = 640, kH = 340, kL = 64, kR = 16, kT = 16, kB = 40;

std::string Frame(const std::string& xlabel, const std::string& ylabel, const Axis& x, const Axis& y, int w = kW, int h = kH) {
  std::string s = Format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\">", w, h, w, h);
  s += Format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fafafa\" stroke=\"#999\"/>", kL, kT, w - kL - kR, h - kT - kB);
  for (int i = 0; i <= 4; ++i) {
    double t = i / 4.0;
    double xv = x.log ? std::exp(std::log(x.lo) + t * (std::log(x.hi) - std::log(x.lo))) : x.lo + t * (x.hi - x.lo);
    double yv = y.log ? std::exp(std::log(y.lo) + t * (std::log(y.hi) - std::log(y.lo))) : y.lo + t * (y.hi - y.lo);
    double px = kL + t * (w - kL - kR), py = (h - kB) - t * (h - kT - kB);
    s += Format("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">{}</text>", F(px), h - kB + 14, F(xv, 3));
    s += Format("<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{}</text>", kL - 4, F(py + 4), F(yv, 4));
    s += Format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#e4e4e4\"/>", kL, F(py), w - kR, F(py));
  }
  s += Format("<text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\">{}</text>", (kL + w - kR) / 2, h - 6, Esc(xlabel));
  s += Format("<text x=\"14\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 14 {})\">{}</text>",
              (kT + h - kB) / 2, (kT + h - kB) / 2, Esc(ylabel));
  return s;
}

bool IsLogParam(const ParamSpec& p) { return p.kind == ParamKind::kLogUniform || (p.kind == ParamKind::kInt && p.log); }

std::string LossCurves(const std::vector<TrialRecord>& t) {
  double max_step = 1, lo = INFINITY;
  std::vector<double> firsts;
  for (const TrialRecord& tr : t) {
    for (const RunRecord& r : tr.runs) {
      if (r.curve.empty()) continue;
      max_step = std::max(max_step, static_cast<double>(r.curve.back().first));
      for (const auto& [s, l] : r.curve) {
        if (std::isfinite(l)) lo = std::min(lo, l);
      }
      size_t k = std::min<size_t>(r.curve.size() - 1, r.curve.size() / 10);
      if (std::isfinite(r.curve[k].second)) firsts.push_back(r.curve[k].second);
    }
  }
  if (!std::isfinite(lo) || firsts.empty()) return "<p>No loss curves yet.</p>";
  std::sort(firsts.begin(), firsts.end());
  double hi = firsts[firsts.size() * 3 / 4];  // the y range shows where trials differ, not step 1's spike
  if (!(hi > lo)) hi = lo + 1;
  Axis x{0, max_step, false}, y{lo - 0.02 * (hi - lo), hi, false};
  std::string s = Frame("step", "loss", x, y);
  for (size_t i = t.size(); i-- > 0;) {  // the best drawn last, on top
    for (const RunRecord& r : t[i].runs) {
      std::string pts;
      for (const auto& [st, l] : r.curve) {
        if (!std::isfinite(l)) break;
        pts += F(x.Map(static_cast<double>(st), kL, kW - kR), 6) + "," + F(y.Map(l, kH - kB, kT), 6) + " ";
      }
      if (pts.empty()) continue;
      s += Format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" stroke-opacity=\"0.85\" points=\"{}\"><title>trial {} ({})</title></polyline>",
                  RankColor(i, t.size()), i == 0 ? 2.5 : 1.2, pts, t[i].id, RunStatusName(t[i].status));
    }
  }
  return s + "</svg>";
}

std::string Scatter(const SweepSpec& spec, size_t p, const std::vector<TrialRecord>& t) {
  const ParamSpec& ps = spec.params[p];
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  for (const TrialRecord& tr : t) {
    if (!std::isfinite(tr.objective) || p >= tr.point.size()) continue;
    xlo = std::min(xlo, tr.point[p].number), xhi = std::max(xhi, tr.point[p].number);
    ylo = std::min(ylo, tr.objective), yhi = std::max(yhi, tr.objective);
  }
  if (!std::isfinite(xlo)) return "";
  if (ps.kind == ParamKind::kUniform || ps.kind == ParamKind::kLogUniform || ps.kind == ParamKind::kInt) xlo = std::min(xlo, ps.lo), xhi = std::max(xhi, ps.hi);
  if (xhi <= xlo) xhi = xlo + 1, xlo -= 1;
  if (yhi <= ylo) yhi = ylo + 1;
  const int w = 310, h = 230;
  Axis x{xlo, xhi, IsLogParam(ps) && xlo > 0}, y{ylo - 0.05 * (yhi - ylo), yhi + 0.05 * (yhi - ylo), false};
  std::string s = Frame(ps.name + (x.log ? " (log)" : ""), "objective", x, y, w, h);
  for (size_t i = 0; i < t.size(); ++i) {
    if (!std::isfinite(t[i].objective) || p >= t[i].point.size()) continue;
    s += Format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\" stroke=\"#333\" stroke-width=\"0.5\"><title>trial {}: {} = {}, objective {}</title></circle>",
                F(x.Map(t[i].point[p].number, kL, w - kR), 6), F(y.Map(t[i].objective, h - kB, kT), 6), i == 0 ? 6 : 4,
                RankColor(i, t.size()), t[i].id, Esc(ps.name), Esc(t[i].point[p].json), F(t[i].objective, 6));
  }
  return s + "</svg>";
}

std::string ParallelCoordinates(const SweepSpec& spec, const std::vector<TrialRecord>& t) {
  std::vector<size_t> axes;
  for (size_t p = 0; p < spec.params.size(); ++p) axes.push_back(p);
  const size_t n_axes = axes.size() + 1;  // + the objective
  const int w = kW, h = 300, top = 24, bottom = h - 30;
  auto ax_x = [&](size_t a) { return kL + static_cast<double>(a) * (w - kL - kR - 40) / static_cast<double>(n_axes - 1); };
  std::vector<double> lo(n_axes, INFINITY), hi(n_axes, -INFINITY);
  auto value = [&](const TrialRecord& tr, size_t a) {
    if (a == axes.size()) return tr.objective;
    const ParamSpec& ps = spec.params[axes[a]];
    double v = tr.point[axes[a]].number;
    return IsLogParam(ps) && v > 0 ? std::log(v) : v;
  };
  for (const TrialRecord& tr : t) {
    if (!std::isfinite(tr.objective) || tr.point.size() != spec.params.size()) continue;
    for (size_t a = 0; a < n_axes; ++a) lo[a] = std::min(lo[a], value(tr, a)), hi[a] = std::max(hi[a], value(tr, a));
  }
  if (!std::isfinite(lo.back())) return "";
  std::string s = Format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\">", w, h, w, h);
  for (size_t i = t.size(); i-- > 0;) {
    if (!std::isfinite(t[i].objective) || t[i].point.size() != spec.params.size()) continue;
    std::string pts;
    for (size_t a = 0; a < n_axes; ++a) {
      double span = hi[a] - lo[a];
      double u = span > 0 ? (value(t[i], a) - lo[a]) / span : 0.5;
      pts += F(ax_x(a), 6) + "," + F(bottom - u * (bottom - top), 6) + " ";
    }
    s += Format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" stroke-opacity=\"0.8\" points=\"{}\"><title>trial {}</title></polyline>",
                RankColor(i, t.size()), i == 0 ? 3 : 1.3, pts, t[i].id);
  }
  for (size_t a = 0; a < n_axes; ++a) {
    std::string name = a == axes.size() ? "objective" : spec.params[axes[a]].name;
    auto shown = [&](double v) { return a < axes.size() && IsLogParam(spec.params[axes[a]]) ? std::exp(v) : v; };
    s += Format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#444\"/>", F(ax_x(a)), top, F(ax_x(a)), bottom);
    s += Format("<text x=\"{}\" y=\"14\" font-size=\"12\" text-anchor=\"middle\">{}</text>", F(ax_x(a)), Esc(name));
    s += Format("<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{}</text>", F(ax_x(a)), bottom + 12, F(shown(lo[a]), 3));
    s += Format("<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{}</text>", F(ax_x(a)), top - 2 + 0, "");
    s += Format("<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"start\">{}</text>", F(ax_x(a) + 3), top + 10, F(shown(hi[a]), 3));
  }
  return s + "</svg>";
}

}  // namespace

std::vector<double> ParamImportance(const SweepSpec& spec, const std::vector<TrialRecord>& trials) {
  std::vector<const TrialRecord*> ok;
  for (const TrialRecord& t : trials) {
    if (t.status == RunStatus::kOk && std::isfinite(t.objective) && t.point.size() == spec.params.size()) ok.push_back(&t);
  }
  std::vector<double> imp(spec.params.size(), 0);
  if (ok.size() < 3) return imp;
  double mean = 0;
  for (const TrialRecord* t : ok) mean += t->objective / static_cast<double>(ok.size());
  double total = 0;
  for (const TrialRecord* t : ok) total += (t->objective - mean) * (t->objective - mean);
  if (total <= 0) return imp;
  const size_t bins = std::clamp<size_t>(ok.size() / 3, 2, 4);
  for (size_t p = 0; p < spec.params.size(); ++p) {
    std::vector<const TrialRecord*> by = ok;
    std::stable_sort(by.begin(), by.end(), [p](const TrialRecord* a, const TrialRecord* b) { return a->point[p].internal < b->point[p].internal; });
    double between = 0;
    size_t start = 0;
    for (size_t b = 0; b < bins; ++b) {
      size_t end = (b + 1) * by.size() / bins;
      // Equal values stay in one bin.
      while (end < by.size() && end > 0 && by[end]->point[p].internal == by[end - 1]->point[p].internal) ++end;
      if (end <= start) continue;
      double m = 0;
      for (size_t i = start; i < end; ++i) m += by[i]->objective / static_cast<double>(end - start);
      between += static_cast<double>(end - start) * (m - mean) * (m - mean);
      start = end;
    }
    imp[p] = between / total;
  }
  return imp;
}

std::string ReportHtml(const SweepSpec& spec, const std::vector<TrialRecord>& t) {
  std::string h = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>zerorun sweep: " + Esc(spec.source) +
                  "</title>\n<style>body{font-family:sans-serif;margin:20px;max-width:1000px}"
                  "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
                  ".grid{display:flex;flex-wrap:wrap;gap:8px}h2{margin-top:28px}</style></head><body>\n";
  int64_t counts[4] = {0, 0, 0, 0};
  for (const TrialRecord& tr : t) ++counts[static_cast<int>(tr.status)];
  h += Format("<h1>Sweep {}</h1>\n<p id=\"summary\">{} search, objective {} ({}); {} trial(s): {} ok, {} stopped early, {} diverged, {} failed.</p>\n",
              Esc(spec.source), StrategyName(spec.strategy), Esc(spec.objective.metric), spec.objective.maximize ? "max" : "min",
              t.size(), counts[0], counts[1], counts[2], counts[3]);
  h += "<h2>Trials, best first</h2>\n<table id=\"trials\"><tr><th>rank</th><th>trial</th><th>status</th><th>objective</th>";
  for (const ParamSpec& p : spec.params) h += "<th>" + Esc(p.name) + "</th>";
  h += "<th>reason</th></tr>\n";
  for (size_t i = 0; i < t.size(); ++i) {
    h += Format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td>", i + 1, t[i].id, RunStatusName(t[i].status),
                std::isfinite(t[i].objective) ? F(t[i].objective, 6) : "-");
    for (size_t p = 0; p < spec.params.size(); ++p) h += "<td>" + Esc(p < t[i].point.size() ? t[i].point[p].json : "") + "</td>";
    h += "<td style=\"text-align:left\">" + Esc(t[i].reason) + "</td></tr>\n";
  }
  h += "</table>\n<h2>Loss curves</h2>\n<p>Every run; colour by rank (dark blue: best, orange: worst); the best is thick.</p>\n<div id=\"curves\">" +
       LossCurves(t) + "</div>\n";
  h += "<h2>Objective against each parameter</h2>\n<div class=\"grid\" id=\"scatter\">";
  for (size_t p = 0; p < spec.params.size(); ++p) h += Scatter(spec, p, t);
  h += "</div>\n<h2>Parallel coordinates</h2>\n<div id=\"parallel\">" + ParallelCoordinates(spec, t) + "</div>\n";
  std::vector<double> imp = ParamImportance(spec, t);
  h += "<h2>Importance</h2>\n<p>Share of the objective's variance (ok trials) explained by binning on the parameter.</p>\n"
       "<svg id=\"importance\" xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"" +
       std::to_string(20 + 22 * spec.params.size()) + "\">";
  for (size_t p = 0; p < spec.params.size(); ++p) {
    double y = 10 + 22.0 * static_cast<double>(p);
    h += Format("<text x=\"150\" y=\"{}\" font-size=\"12\" text-anchor=\"end\">{}</text>", F(y + 13), Esc(spec.params[p].name));
    h += Format("<rect x=\"156\" y=\"{}\" width=\"{}\" height=\"16\" fill=\"#3a6ea5\"/>", F(y), F(400 * imp[p]));
    h += Format("<text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>", F(160 + 400 * imp[p]), F(y + 13), F(imp[p], 2));
  }
  h += "</svg>\n</body></html>\n";
  return h;
}

void WriteReport(const SweepSpec& spec, const std::string& out_dir, const std::string& path, const std::string& trials_dir) {
  WriteFileAtomic(path, ReportHtml(spec, LoadSweepResults(spec, out_dir, trials_dir)));
}

}  // namespace zerorun::experiments
