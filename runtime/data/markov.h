// A synthetic corpus with a known entropy floor: tokens from a fixed, seeded, random sparse Markov
// chain. Each state (token) has `successors` possible next tokens with random (Dirichlet(1))
// probabilities; one of them is always s+1 and, for s = 0, another is 2, so the chain is irreducible
// and aperiodic (cycles of length V and V-1) and has one stationary distribution pi. Its entropy rate
//   H = -sum_s pi(s) sum_t P(t|s) ln P(t|s)   (nats/token)
// is the lowest cross-entropy any model can reach on long samples: the demo prints how close training
// gets to it.
#pragma once

#include <cstdint>
#include <vector>

namespace zerorun::data {

struct MarkovChainOptions {
  int vocab_size = 256;  // states = tokens, >= 3
  int successors = 4;    // next-token choices per state, 2 <= successors <= vocab_size
  uint64_t seed = 1234;  // the chain itself (transition table) is a pure function of this
};

class MarkovChain {
 public:
  // Throws InvalidArgument for out-of-range options.
  explicit MarkovChain(const MarkovChainOptions& options = {});

  int vocab_size() const { return options_.vocab_size; }
  int successors() const { return options_.successors; }

  // Exact entropy rate in nats/token (the best achievable mean cross-entropy).
  double EntropyRateNats() const { return entropy_rate_; }
  // The stationary distribution (vocab_size).
  const std::vector<double>& Stationary() const { return stationary_; }
  // P(next = to | current = from); 0 for a non-successor.
  double Prob(int from, int to) const;

  // `n` tokens of one walk: the first drawn from the stationary distribution, then the chain. A pure
  // function of (chain seed, sample_seed, stream).
  std::vector<int32_t> Sample(int64_t n, uint64_t sample_seed, uint64_t stream = 0) const;

  // Mean -ln P(x[i+1] | x[i]) over a sequence (the true model's cross-entropy on it).
  double CrossEntropyNats(const std::vector<int32_t>& tokens) const;

 private:
  MarkovChainOptions options_;
  std::vector<int32_t> next_;    // (V, K) successor tokens
  std::vector<double> prob_;     // (V, K) their probabilities
  std::vector<float> cdf_;       // (V, K) cumulative, for sampling
  std::vector<double> stationary_;
  double entropy_rate_ = 0.0;
};

}  // namespace zerorun::data
