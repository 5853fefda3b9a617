// Small string helpers of the launcher: splitting, trimming, shell quoting, env-file parsing.
// Shell quoting matters for security and correctness: every remote command line is built with
// ShellQuote so arguments with spaces or quotes arrive verbatim.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace zerorun::launcher {

// Splits on `sep`; keeps empty fields ("a@@b" -> {"a","","b"}); "" -> {""}.
std::vector<std::string> Split(const std::string& s, char sep);
std::string Trim(const std::string& s);
bool StartsWith(const std::string& s, const std::string& prefix);

// Quotes `arg` for a POSIX shell: unchanged when it only holds [A-Za-z0-9_@%+=:,./-], otherwise
// single-quoted with embedded ' written as '\''. The empty string becomes ''.
std::string ShellQuote(const std::string& arg);
// Joins ShellQuote(a) of every element with spaces.
std::string ShellJoin(const std::vector<std::string>& argv);
// Splits shell-style (whitespace, '...' and "..." quoting, backslash escapes) as Python's shlex.split.
// Throws InvalidArgument on an unterminated quote.
std::vector<std::string> ShellSplit(const std::string& text);

// An ordered KEY=VALUE list (later entries override earlier ones with the same key).
using EnvList = std::vector<std::pair<std::string, std::string>>;
void EnvSet(EnvList* env, const std::string& key, const std::string& value);
const std::string* EnvGet(const EnvList& env, const std::string& key);

// Parses a .zerorun_env file: KEY=VALUE lines; blank lines and lines starting with '#' are skipped;
// whitespace around key and value is stripped; a value may be wrapped in matching single or double
// quotes, which are removed. Keys must match [A-Za-z_][A-Za-z0-9_]*. `origin` names the file in
// errors ("<origin>:<line>: ..."). Throws InvalidArgument on a line without '=' or a bad key.
EnvList ParseEnvFile(const std::string& text, const std::string& origin);

}  // namespace zerorun::launcher
