// The seeded sparse Markov chain corpus; see markov.h.
#include "zerorun/runtime/data/markov.h"

#include <algorithm>
#include <cmath>

#include "zerorun/core/error.h"
#include "zerorun/core/rng.h"

namespace zerorun::data {

MarkovChain::MarkovChain(const MarkovChainOptions& options) : options_(options) {
  const int V = options_.vocab_size, K = options_.successors;
  if (V < 3) ZR_THROW(InvalidArgument, "Markov corpus: vocab_size must be >= 3, got {}", V);
  if (K < 2 || K > V) ZR_THROW(InvalidArgument, "Markov corpus: successors must be in [2, vocab_size={}], got {}", V, K);
  next_.resize(static_cast<size_t>(V) * K);
  prob_.resize(next_.size());
  cdf_.resize(next_.size());
  Rng rng(options_.seed, /*stream=*/0x6d61726b6f76ULL);  // "markov"
  for (int s = 0; s < V; ++s) {
    // Successor set: s+1 (and 2 for state 0, for aperiodicity), then distinct random states.
    std::vector<int32_t> succ = {static_cast<int32_t>((s + 1) % V)};
    if (s == 0) succ.push_back(2);
    while (static_cast<int>(succ.size()) < K) {
      int32_t t = static_cast<int32_t>(rng.NextU32() % static_cast<uint32_t>(V));
      if (std::find(succ.begin(), succ.end(), t) == succ.end()) succ.push_back(t);
    }
    // Dirichlet(1, ..., 1) weights: normalised exponentials.
    double total = 0.0;
    std::vector<double> w(static_cast<size_t>(K));
    for (int j = 0; j < K; ++j) {
      w[static_cast<size_t>(j)] = -std::log(1.0 - static_cast<double>(rng.Uniform())) + 1e-3;
      total += w[static_cast<size_t>(j)];
    }
    double cum = 0.0;
    for (int j = 0; j < K; ++j) {
      const size_t i = static_cast<size_t>(s) * K + j;
      next_[i] = succ[static_cast<size_t>(j)];
      prob_[i] = w[static_cast<size_t>(j)] / total;
      cum += prob_[i];
      cdf_[i] = static_cast<float>(cum);
    }
    cdf_[static_cast<size_t>(s) * K + K - 1] = 1.0f;
  }

  // Stationary distribution by power iteration (converges: irreducible and aperiodic).
  std::vector<double> pi(static_cast<size_t>(V), 1.0 / V), nxt(static_cast<size_t>(V));
  for (int it = 0; it < 200000; ++it) {
    std::fill(nxt.begin(), nxt.end(), 0.0);
    for (int s = 0; s < V; ++s) {
      for (int j = 0; j < K; ++j) {
        const size_t i = static_cast<size_t>(s) * K + j;
        nxt[static_cast<size_t>(next_[i])] += pi[static_cast<size_t>(s)] * prob_[i];
      }
    }
    double diff = 0.0;
    for (int s = 0; s < V; ++s) diff += std::fabs(nxt[static_cast<size_t>(s)] - pi[static_cast<size_t>(s)]);
    pi.swap(nxt);
    if (diff < 1e-14) break;
  }
  stationary_ = pi;
  double h = 0.0;
  for (int s = 0; s < V; ++s) {
    double hs = 0.0;
    for (int j = 0; j < K; ++j) {
      const double p = prob_[static_cast<size_t>(s) * K + j];
      hs -= p * std::log(p);
    }
    h += pi[static_cast<size_t>(s)] * hs;
  }
  entropy_rate_ = h;
}

double MarkovChain::Prob(int from, int to) const {
  const int K = options_.successors;
  double p = 0.0;
  for (int j = 0; j < K; ++j) {
    const size_t i = static_cast<size_t>(from) * K + j;
    if (next_[i] == to) p += prob_[i];
  }
  return p;
}

std::vector<int32_t> MarkovChain::Sample(int64_t n, uint64_t sample_seed, uint64_t stream) const {
  std::vector<int32_t> out(static_cast<size_t>(std::max<int64_t>(n, 0)));
  if (n <= 0) return out;
  Rng rng(HashName("markov-sample") ^ sample_seed ^ (options_.seed * 0x9E3779B97F4A7C15ULL), stream);
  const int V = options_.vocab_size, K = options_.successors;
  // First token from pi.
  double u = rng.Uniform(), cum = 0.0;
  int s = V - 1;
  for (int t = 0; t < V; ++t) {
    cum += stationary_[static_cast<size_t>(t)];
    if (u < cum) {
      s = t;
      break;
    }
  }
  out[0] = s;
  for (int64_t i = 1; i < n; ++i) {
    const float r = rng.Uniform();
    const size_t base = static_cast<size_t>(s) * K;
    int j = 0;
    while (j < K - 1 && r >= cdf_[base + j]) ++j;
    s = next_[base + j];
    out[static_cast<size_t>(i)] = s;
  }
  (void)V;
  return out;
}

double MarkovChain::CrossEntropyNats(const std::vector<int32_t>& tokens) const {
  if (tokens.size() < 2) return 0.0;
  double total = 0.0;
  for (size_t i = 0; i + 1 < tokens.size(); ++i) total -= std::log(Prob(tokens[i], tokens[i + 1]));
  return total / static_cast<double>(tokens.size() - 1);
}

}  // namespace zerorun::data
