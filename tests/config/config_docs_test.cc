// docs/config.md's key table and the schema in code must agree in both directions: every key the loader
// accepts is documented with its type, default and status, and every documented key exists.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "config_test_util.h"

using namespace zr_config_test;
namespace fs = std::filesystem;

namespace {

fs::path RepoRoot() {
  if (const char* d = std::getenv("ZERORUN_TEST_BINARY_DIR")) return fs::canonical(fs::path(d) / "include" / "zerorun");
  return fs::path(__FILE__).parent_path().parent_path().parent_path();
}

std::string Trim(std::string s) {
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}
std::string StripTicks(std::string s) {
  s = Trim(s);
  if (s.size() >= 2 && s.front() == '`' && s.back() == '`') s = s.substr(1, s.size() - 2);
  return s;
}

// Splits a markdown row on '|' that are not escaped as "\|".
std::vector<std::string> Cells(const std::string& row) {
  std::vector<std::string> cells;
  std::string cur;
  for (size_t i = 0; i < row.size(); ++i) {
    if (row[i] == '\\' && i + 1 < row.size() && row[i + 1] == '|') {
      cur += '|';
      ++i;
    } else if (row[i] == '|') {
      cells.push_back(cur);
      cur.clear();
    } else {
      cur += row[i];
    }
  }
  cells.push_back(cur);
  // "| a | b |" → "", a, b, ""
  if (!cells.empty() && Trim(cells.front()).empty()) cells.erase(cells.begin());
  if (!cells.empty() && Trim(cells.back()).empty()) cells.pop_back();
  return cells;
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("docs/config.md documents exactly the keys the loader accepts") {
    std::ifstream in(RepoRoot() / "docs" / "config.md");
    REQUIRE(in.good());
    std::map<std::string, rt::SchemaEntry> documented;
    bool inside = false;
    int rows = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.find("<!-- schema:begin -->") != std::string::npos) inside = true;
      if (line.find("<!-- schema:end -->") != std::string::npos) inside = false;
      if (!inside || line.rfind("| `", 0) != 0) continue;
      const auto c = Cells(line);
      REQUIRE_MESSAGE(c.size() == 6, line);
      ++rows;
      rt::SchemaEntry e{StripTicks(c[0]), Trim(c[1]), Trim(c[2]), StripTicks(c[3]), Trim(c[5]), Trim(c[4])};
      CHECK_MESSAGE(!e.doc.empty(), "docs/config.md: no meaning for ", e.path);
      const std::string id = e.path + " @" + e.variant;
      CHECK_MESSAGE(documented.count(id) == 0, "docs/config.md documents ", id, " twice");
      documented[id] = e;
    }
    CHECK(rows > 250);
    std::set<std::string> in_code;
    for (const rt::SchemaEntry& s : rt::ConfigSchema()) {
      const std::string id = s.path + " @" + s.variant;
      in_code.insert(id);
      auto it = documented.find(id);
      if (it == documented.end()) {
        FAIL_CHECK("key ", id, " is accepted by the loader but missing from docs/config.md "
                   "(regenerate the table with `zerorun-config schema`)");
        continue;
      }
      CHECK_MESSAGE(it->second.type == s.type, id, ": docs say type '", it->second.type, "', code '", s.type, "'");
      CHECK_MESSAGE(it->second.default_text == s.default_text, id, ": docs say default '", it->second.default_text,
                    "', code '", s.default_text, "'");
      CHECK_MESSAGE(it->second.status == s.status, id, ": docs say status '", it->second.status, "', code '",
                    s.status, "'");
    }
    for (const auto& [id, e] : documented) {
      CHECK_MESSAGE(in_code.count(id) == 1, "docs/config.md documents ", id, " but the loader does not accept it");
    }
  }

  TEST_CASE("schema: every documented (non-refused) key is accepted by the loader at its place") {
    // Spot-check the schema against the loader: each leaf key of a section, written with its default,
    // loads without an unknown-key error.
    for (const rt::SchemaEntry& s : rt::ConfigSchema()) {
      if (s.type == "refused" || s.path.find('.') == std::string::npos || !s.variant.empty()) continue;
      if (s.type.rfind("object", 0) == 0 || s.status.rfind("deprecated", 0) == 0) continue;
      const std::string section = s.path.substr(0, s.path.rfind('.'));
      if (section.find('.') != std::string::npos) continue;  // top-level sections only
      const std::string key = s.path.substr(s.path.rfind('.') + 1);
      const std::string j = "{\"train_batch_size\": 8, \"" + section + "\": {\"" + key + "\": " +
                            (s.default_text == "derived" ? "null" : s.default_text) + "}}";
      rt::LoadOptions o = Opts();
      const auto e = Errors(j, o);
      for (const auto& i : e) CHECK_MESSAGE(i.message.find("unknown key") == std::string::npos, j, " → ", i.ToString());
    }
  }
}
