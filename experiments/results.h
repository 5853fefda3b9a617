// The results files of a sweep: a trial record to and from JSON (result.json, results.jsonl), the
// results table (results.csv) and the ranking both use.
#pragma once

#include <string>
#include <vector>

#include "zerorun/experiments/sweep.h"

namespace zerorun::experiments {

std::string TrialToJson(const SweepSpec& spec, const TrialRecord& t);  // one line
// Throws InvalidArgument naming `source` when the text is not a trial record of this spec.
TrialRecord TrialFromJson(const SweepSpec& spec, const std::string& text, const std::string& source);

// Best first: ok, then stopped, diverged, failed; within each by objective (the spec's direction).
void SortTrials(const SweepSpec& spec, std::vector<TrialRecord>* trials);

std::string ResultsCsv(const SweepSpec& spec, const std::vector<TrialRecord>& sorted);

// Writes `text` to `path` through a temporary file and a rename. Throws IoError.
void WriteFileAtomic(const std::string& path, const std::string& text);
std::string ReadWholeFile(const std::string& path);  // throws IoError

}  // namespace zerorun::experiments
