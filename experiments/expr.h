// Derived values of a sweep: a small arithmetic language over named numbers, e.g.
// "base_lr * sqrt(train_batch_size / 256)". Numbers, names, + - * / ^ (right-associative), unary
// minus, parentheses and the functions sqrt, log, exp, abs, min, max, pow, floor, ceil, round.
#pragma once

#include <map>
#include <string>

namespace zerorun::experiments {

// Evaluates `text` with the values in `names`. Throws InvalidArgument naming `where`, the position
// and the problem (an unknown name lists the known ones) for bad syntax, unknown names or functions,
// and a non-finite result.
double EvalExpr(const std::string& text, const std::map<std::string, double>& names, const std::string& where);

}  // namespace zerorun::experiments
