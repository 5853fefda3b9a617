// String helpers: split/trim, POSIX shell quoting and splitting, .zerorun_env parsing.
#include "zerorun/launcher/text.h"

#include <cctype>
#include <sstream>

#include "zerorun/core/error.h"

namespace zerorun::launcher {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}

std::string Trim(const std::string& s) {
  size_t b = 0;
  size_t e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::string ShellQuote(const std::string& arg) {
  if (arg.empty()) return "''";
  bool plain = true;
  for (char c : arg) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || std::string_view("_@%+=:,./-").find(c) != std::string_view::npos)) {
      plain = false;
      break;
    }
  }
  if (plain) return arg;
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

std::string ShellJoin(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    out += ShellQuote(a);
  }
  return out;
}

std::vector<std::string> ShellSplit(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  bool have = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (have) out.push_back(cur);
      cur.clear();
      have = false;
    } else if (c == '\'') {
      size_t end = text.find('\'', i + 1);
      if (end == std::string::npos) ZR_THROW(InvalidArgument, "unterminated ' quote in '{}'", text);
      cur += text.substr(i + 1, end - i - 1);
      have = true;
      i = end;
    } else if (c == '"') {
      have = true;
      for (++i;; ++i) {
        if (i >= text.size()) ZR_THROW(InvalidArgument, "unterminated \" quote in '{}'", text);
        if (text[i] == '"') break;
        if (text[i] == '\\' && i + 1 < text.size() && std::string_view("\\\"$`").find(text[i + 1]) != std::string_view::npos) ++i;
        cur += text[i];
      }
    } else if (c == '\\' && i + 1 < text.size()) {
      cur += text[++i];
      have = true;
    } else {
      cur += c;
      have = true;
    }
  }
  if (have) out.push_back(cur);
  return out;
}

void EnvSet(EnvList* env, const std::string& key, const std::string& value) {
  for (auto& kv : *env) {
    if (kv.first == key) {
      kv.second = value;
      return;
    }
  }
  env->emplace_back(key, value);
}

const std::string* EnvGet(const EnvList& env, const std::string& key) {
  for (const auto& kv : env) {
    if (kv.first == key) return &kv.second;
  }
  return nullptr;
}

EnvList ParseEnvFile(const std::string& text, const std::string& origin) {
  EnvList out;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    std::string line = Trim(raw);
    if (line.empty() || line[0] == '#') continue;
    if (StartsWith(line, "export ")) line = Trim(line.substr(7));
    size_t eq = line.find('=');
    if (eq == std::string::npos) {
      ZR_THROW(InvalidArgument, "{}:{}: expected KEY=VALUE, got '{}'", origin, line_no,
               line.size() <= 200 ? line : line.substr(0, 200) + "...");
    }
    std::string key = Trim(line.substr(0, eq));
    std::string value = Trim(line.substr(eq + 1));
    bool key_ok = !key.empty() && !std::isdigit(static_cast<unsigned char>(key[0]));
    for (char c : key) key_ok = key_ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!key_ok) {
      ZR_THROW(InvalidArgument, "{}:{}: '{}' is not a valid variable name", origin, line_no,
               key.size() <= 200 ? key : key.substr(0, 200) + "...");
    }
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    EnvSet(&out, key, value);
  }
  return out;
}

}  // namespace zerorun::launcher
