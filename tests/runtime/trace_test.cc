// The timeline (core/trace.h; EngineOptions::trace_file): the Tracer's JSON is valid Chrome
// trace-event format (parsed here with RapidJSON, schema checked); a 2-rank ZeRO-2 run with activation
// checkpointing writes one file per rank with steps, phases, module forward/backward/recompute spans,
// optimizer sub-groups and the communicator's ops with bytes; every collective lies inside a step (or
// the engine's construction), and bucket reductions overlap backward.
#include <doctest/doctest.h>
#include <rapidjson/document.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/runtime/engine_test_util.h"
#include "zerorun/core/timer.h"
#include "zerorun/core/trace.h"

namespace fs = std::filesystem;
using namespace zerorun;

namespace {

struct Span {
  std::string name, cat;
  double ts = 0, dur = 0;
  int pid = -1, tid = -1;
  const rapidjson::Value* args = nullptr;
  double end() const { return ts + dur; }
};

struct ParsedTrace {
  rapidjson::Document doc;
  std::vector<Span> spans;
  std::map<int, std::string> threads;  // tid -> name
  std::string process;
};

// Parses and checks the schema: an object with a traceEvents array; every event has name, ph, pid,
// tid; "X" events have numeric ts and dur >= 0; "M" events name the process and the threads.
void Parse(const std::string& json, ParsedTrace* out) {
  out->doc.Parse(json.c_str(), json.size());
  REQUIRE_MESSAGE(!out->doc.HasParseError(), "trace is not JSON (offset " << out->doc.GetErrorOffset() << ")");
  REQUIRE(out->doc.IsObject());
  REQUIRE(out->doc.HasMember("traceEvents"));
  const rapidjson::Value& events = out->doc["traceEvents"];
  REQUIRE(events.IsArray());
  for (const auto& e : events.GetArray()) {
    REQUIRE(e.IsObject());
    REQUIRE((e.HasMember("name") && e["name"].IsString()));
    REQUIRE((e.HasMember("ph") && e["ph"].IsString()));
    REQUIRE((e.HasMember("pid") && e["pid"].IsInt()));
    REQUIRE((e.HasMember("tid") && e["tid"].IsInt()));
    const std::string ph = e["ph"].GetString();
    if (ph == "M") {
      REQUIRE((e.HasMember("args") && e["args"].HasMember("name") == (std::string(e["name"].GetString()) != "process_sort_index")));
      if (std::string(e["name"].GetString()) == "thread_name") out->threads[e["tid"].GetInt()] = e["args"]["name"].GetString();
      if (std::string(e["name"].GetString()) == "process_name") out->process = e["args"]["name"].GetString();
      continue;
    }
    REQUIRE(ph == "X");
    REQUIRE((e.HasMember("ts") && e["ts"].IsNumber() && e.HasMember("dur") && e["dur"].IsNumber()));
    REQUIRE((e.HasMember("cat") && e["cat"].IsString()));
    Span s;
    s.name = e["name"].GetString();
    s.cat = e["cat"].GetString();
    s.ts = e["ts"].GetDouble();
    s.dur = e["dur"].GetDouble();
    CHECK(s.dur >= 0);
    s.pid = e["pid"].GetInt();
    s.tid = e["tid"].GetInt();
    if (e.HasMember("args")) s.args = &e["args"];
    out->spans.push_back(s);
  }
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE_MESSAGE(in.good(), "cannot read " << p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("tracer: spans on named tracks, thread-current scopes, escaped names, valid JSON") {
  Tracer t(3, "rank \"3\"");
  const int comm = t.Track("comm world");
  CHECK(comm == 1);
  CHECK(t.Track("comm world") == comm);
  CHECK(TraceSpan::Active() == false);
  {
    TraceSpan none("x", "not recorded");  // no tracer current
  }
  {
    ScopedTrace scope(&t);
    CHECK(TraceSpan::Active());
    TraceSpan outer("phase", "outer", "\"k\": 1");
    { TraceSpan inner("phase", "in\\ner\n"); }
    std::thread other([&] {
      CHECK(Tracer::Current() == nullptr);  // thread-local
      // One clock reading: two would differ by however long this thread is descheduled between them.
      const double t0 = NowSeconds();
      t.Complete("all_reduce", "comm", t0, t0 + 1e-3, comm, "\"bytes\": 64");
    });
    other.join();
  }
  CHECK(Tracer::Current() == nullptr);
  CHECK(t.num_events() == 3);
  ParsedTrace p;
  Parse(t.ToJson(), &p);
  CHECK(p.process == "rank \"3\"");
  CHECK(p.threads.at(0) == "main");
  CHECK(p.threads.at(1) == "comm world");
  REQUIRE(p.spans.size() == 3);
  std::map<std::string, Span> by;
  for (const Span& s : p.spans) by[s.name] = s;
  REQUIRE(by.count("in\\ner\n") == 1);
  CHECK(by["outer"].pid == 3);
  CHECK(by["outer"].ts <= by["in\\ner\n"].ts);
  CHECK(by["in\\ner\n"].end() <= by["outer"].end() + 1e-3);
  CHECK((*by["outer"].args)["k"].GetInt() == 1);
  CHECK(by["all_reduce"].tid == comm);
  CHECK(by["all_reduce"].dur == doctest::Approx(1000).epsilon(1e-3));
  CHECK((*by["all_reduce"].args)["bytes"].GetInt() == 64);
}

TEST_CASE("tracer: an unwritable path is an IoError naming it") {
  Tracer t(0, "rank 0");
  CHECK_THROWS_WITH_AS(t.WriteFile("/proc/zr_no_such_dir/trace.json"), doctest::Contains("/proc/zr_no_such_dir"),
                       IoError);
}

TEST_CASE("trace of a 2-rank ZeRO-2 run: steps contain every collective, reductions overlap backward") {
  fs::path base = fs::temp_directory_path() / ("zr_trace_" + std::to_string(::getpid()));
  fs::remove_all(base);
  zrtest::RunSpec s;
  s.world = 2;
  s.stage = 2;
  s.micro = 4;
  s.gas = 2;
  s.steps = 3;
  gpt::GptConfig gc = zrtest::TinyGpt(DType::kF32);
  gc.n_layer = 4;
  gc.d_model = 32;
  gc.seq_len = 16;
  s.model = gc;
  // Many small buckets (reduce_bucket_size 200 elements), sub-groups of 4096 elements, checkpointed blocks.
  s.zero_json = R"(, "overlap_comm": true, "sub_group_size": 4096)";
  s.extra_json = R"(, "activation_checkpointing": {"cpu_checkpointing": false})";
  s.engine_options.trace_file = (base / "trace.json").string();
  zrtest::Train(s);
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    const fs::path file = base / (rank == 0 ? "trace.json" : "trace.rank1.json");
    ParsedTrace p;
    Parse(ReadFile(file), &p);
    CHECK(p.process == Format("rank {}", rank));
    CHECK(p.threads.at(0) == "main");
    std::vector<Span> steps, comm, backward, modules_fwd, modules_bwd, recompute, subgroups, inits;
    int comm_tid = -1;
    for (const auto& [tid, name] : p.threads) {
      if (name == "comm world") comm_tid = tid;
    }
    REQUIRE(comm_tid > 0);
    for (const Span& sp : p.spans) {
      CHECK(sp.pid == rank);
      if (sp.cat == "step") steps.push_back(sp);
      if (sp.cat == "comm") {
        comm.push_back(sp);
        CHECK(sp.tid == comm_tid);
        REQUIRE(sp.args != nullptr);
        CHECK((*sp.args)["bytes"].GetInt64() >= 0);
        CHECK((*sp.args)["seq"].GetInt64() > 0);
      }
      if (sp.cat == "phase" && sp.name == "backward") backward.push_back(sp);
      if (sp.cat == "phase" && sp.name == "engine init") inits.push_back(sp);
      if (sp.cat == "forward" && sp.name.find("attn") != std::string::npos) modules_fwd.push_back(sp);
      if (sp.cat == "backward" && sp.name.find("mlp") != std::string::npos) modules_bwd.push_back(sp);
      if (sp.cat == "recompute") recompute.push_back(sp);
      if (sp.cat == "optimizer") subgroups.push_back(sp);
    }
    REQUIRE(steps.size() == 3);
    for (int i = 0; i < 3; ++i) CHECK(steps[static_cast<size_t>(i)].name == Format("step {}", i + 1));
    REQUIRE(inits.size() == 1);
    CHECK(backward.size() == 6);  // gas 2 x 3 steps
    CHECK(modules_fwd.size() >= 4 * 6);
    CHECK(modules_bwd.size() >= 4 * 6);
    CHECK(recompute.size() >= 4 * 6);  // each checkpointed block replays its forward in backward
    CHECK(subgroups.size() >= 3);
    // Every collective inside the engine's construction or one step.
    int reductions = 0;
    int overlapping = 0;
    for (const Span& c : comm) {
      bool inside = false;
      for (const Span& w : steps) inside = inside || (c.ts >= w.ts && c.end() <= w.end());
      for (const Span& w : inits) inside = inside || (c.ts >= w.ts && c.end() <= w.end());
      CHECK_MESSAGE(inside, c.name << " at " << c.ts << " (" << c.dur << " us) lies outside every step");
      if (c.name != "reduce_scatter") continue;
      ++reductions;
      CHECK((*c.args)["bytes"].GetInt64() > 0);
      for (const Span& b : backward) overlapping += (c.ts < b.end() && c.end() > b.ts) ? 1 : 0;
    }
    CHECK(reductions >= 6 * 4);  // several buckets per backward
    CHECK_MESSAGE(overlapping > 0, "no reduce_scatter span overlaps a backward span");
    // Optimizer sub-groups inside steps.
    for (const Span& g : subgroups) {
      bool inside = false;
      for (const Span& w : steps) inside = inside || (g.ts >= w.ts && g.end() <= w.end());
      CHECK(inside);
    }
  }
  fs::remove_all(base);
}

}  // TEST_SUITE
