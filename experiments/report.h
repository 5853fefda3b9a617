// The sweep's picture: one self-contained HTML file (inline SVG, no scripts or external files) with
// the ranked trials, every run's loss curve, the objective against each swept parameter, parallel
// coordinates and a per-parameter importance (the share of the objective's variance explained by
// binning the trials on that parameter).
#pragma once

#include <string>
#include <vector>

#include "zerorun/experiments/spec.h"
#include "zerorun/experiments/sweep.h"

namespace zerorun::experiments {

// The report's HTML for `sorted` (best first, as LoadSweepResults returns).
std::string ReportHtml(const SweepSpec& spec, const std::vector<TrialRecord>& sorted);

// Importance of each parameter in [0, 1] (0 for derived or constant ones), from the ok trials.
std::vector<double> ParamImportance(const SweepSpec& spec, const std::vector<TrialRecord>& trials);

// Loads out_dir's finished trials and writes the report to `path`. Throws IoError / InvalidArgument.
void WriteReport(const SweepSpec& spec, const std::string& out_dir, const std::string& path,
                 const std::string& trials_dir = "");

}  // namespace zerorun::experiments
