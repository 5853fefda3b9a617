// A recursive-descent evaluator: expr := term (('+'|'-') term)*; term := unary (('*'|'/') unary)*;
// unary := '-' unary | power; power := atom ('^' unary)?; atom := number | name | name '(' args ')' | '(' expr ')'.
#include "zerorun/experiments/expr.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "zerorun/core/error.h"

namespace zerorun::experiments {
namespace {

class Parser {
 public:
  Parser(const std::string& text, const std::map<std::string, double>& names, const std::string& where)
      : s_(text), names_(names), where_(where) {}

  double Run() {
    double v = Expr();
    Skip();
    if (pos_ != s_.size()) Fail(Format("unexpected '{}'", s_[pos_]));
    if (!std::isfinite(v)) Fail("the result is not finite");
    return v;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    ZR_THROW(InvalidArgument, "{}: expression \"{}\" at character {}: {}", where_, s_, pos_ + 1, what);
  }
  void Skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Eat(char c) {
    Skip();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  double Expr() {
    double v = Term();
    for (;;) {
      if (Eat('+')) v += Term();
      else if (Eat('-')) v -= Term();
      else return v;
    }
  }
  double Term() {
    double v = Unary();
    for (;;) {
      if (Eat('*')) {
        v *= Unary();
      } else if (Eat('/')) {
        double d = Unary();
        if (d == 0) Fail("division by zero");
        v /= d;
      } else {
        return v;
      }
    }
  }
  double Unary() {
    if (Eat('-')) return -Unary();
    if (Eat('+')) return Unary();
    return Power();
  }
  double Power() {
    double base = Atom();
    if (Eat('^')) return std::pow(base, Unary());
    return base;
  }
  double Atom() {
    Skip();
    if (pos_ >= s_.size()) Fail("expected a number, a name or '('");
    if (Eat('(')) {
      double v = Expr();
      if (!Eat(')')) Fail("expected ')'");
      return v;
    }
    char c = s_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      const char* begin = s_.c_str() + pos_;
      char* end = nullptr;
      double v = std::strtod(begin, &end);
      if (end == begin) Fail("bad number");
      pos_ += static_cast<size_t>(end - begin);
      return v;
    }
    if (!std::isalpha(static_cast<unsigned char>(c)) && c != '_') Fail(Format("unexpected '{}'", c));
    size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
    std::string name = s_.substr(start, pos_ - start);
    if (Eat('(')) return Call(name, start);
    auto it = names_.find(name);
    if (it == names_.end()) {
      std::string known;
      for (const auto& [k, v] : names_) known += (known.empty() ? "" : ", ") + k;
      pos_ = start;
      Fail(Format("unknown name '{}' (known: {})", name, known.empty() ? "none" : known));
    }
    return it->second;
  }
  double Call(const std::string& fn, size_t start) {
    std::vector<double> args;
    if (!Eat(')')) {
      do args.push_back(Expr());
      while (Eat(','));
      if (!Eat(')')) Fail("expected ')' or ','");
    }
    auto need = [&](size_t n) {
      if (args.size() != n) {
        pos_ = start;
        Fail(Format("{}() takes {} argument(s), got {}", fn, n, args.size()));
      }
    };
    if (fn == "sqrt") { need(1); if (args[0] < 0) Fail("sqrt of a negative number"); return std::sqrt(args[0]); }
    if (fn == "log") { need(1); if (args[0] <= 0) Fail("log of a number <= 0"); return std::log(args[0]); }
    if (fn == "exp") { need(1); return std::exp(args[0]); }
    if (fn == "abs") { need(1); return std::fabs(args[0]); }
    if (fn == "floor") { need(1); return std::floor(args[0]); }
    if (fn == "ceil") { need(1); return std::ceil(args[0]); }
    if (fn == "round") { need(1); return std::round(args[0]); }
    if (fn == "pow") { need(2); return std::pow(args[0], args[1]); }
    if (fn == "min") { need(2); return std::min(args[0], args[1]); }
    if (fn == "max") { need(2); return std::max(args[0], args[1]); }
    pos_ = start;
    Fail(Format("unknown function '{}' (known: sqrt, log, exp, abs, floor, ceil, round, pow, min, max)", fn));
  }

  const std::string& s_;
  const std::map<std::string, double>& names_;
  const std::string& where_;
  size_t pos_ = 0;
};

}  // namespace

double EvalExpr(const std::string& text, const std::map<std::string, double>& names, const std::string& where) {
  return Parser(text, names, where).Run();
}

}  // namespace zerorun::experiments
