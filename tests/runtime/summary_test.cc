// The per-rank summary JSON: every contract key present with the right values, NaN as null,
// written atomically, {rank} expanded.
#include <doctest/doctest.h>

#include <rapidjson/document.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "zerorun/core/error.h"
#include "zerorun/runtime/summary.h"

using namespace zerorun::runtime;

TEST_SUITE("unit") {

TEST_CASE("summary JSON carries every contract key") {
  TrainSummary s;
  s.rank = 1;
  s.world_size = 2;
  s.zero_stage = 2;
  s.dtype = "bf16";
  s.steps = 3;
  s.skipped_steps = 1;
  s.global_samples = 48;
  s.losses = {5.5, 4.25, NAN};
  s.final_loss = 4.25;
  s.loss_scale = 1;
  s.lr = 3e-4;
  s.tokens_per_second = 1234.5;
  s.parameters = 1000;
  s.memory.current[static_cast<size_t>(zerorun::MemCategory::kParams)] = 2000;
  s.memory.peak_total = 9000;
  s.comm_bytes["all_reduce"] = {3, 6000, 6000, 0.25};
  s.timers_ms["backward_allreduce"] = 12.5;
  rapidjson::Document d;
  std::string json = SummaryToJson(s);
  REQUIRE_FALSE(d.Parse(json.c_str()).HasParseError());
  for (const char* key : {"rank", "world_size", "zero_stage", "dtype", "steps", "skipped_steps", "global_samples",
                          "losses", "final_loss", "loss_scale", "lr", "tokens_per_second", "parameters",
                          "memory_bytes", "comm_bytes", "timers_ms"}) {
    CHECK_MESSAGE(d.HasMember(key), key);
  }
  CHECK(d["rank"].GetInt() == 1);
  CHECK(std::string(d["dtype"].GetString()) == "bf16");
  CHECK(d["losses"].Size() == 3);
  CHECK(d["losses"][1].GetDouble() == 4.25);
  CHECK(d["losses"][2].IsNull());
  CHECK(d["memory_bytes"]["params"]["current"].GetInt64() == 2000);
  CHECK(d["memory_bytes"]["peak_total"].GetInt64() == 9000);
  CHECK(d["memory_bytes"].HasMember("nvme"));
  CHECK(d["comm_bytes"]["all_reduce"]["bytes_sent"].GetInt64() == 6000);
  CHECK(d["comm_bytes"]["all_reduce"]["seconds"].GetDouble() == 0.25);
  CHECK(d["timers_ms"]["backward_allreduce"].GetDouble() == 12.5);
  CHECK(!d.HasMember("rollbacks"));  // no spike guard
  s.spike_guard = true;
  CHECK(SummaryToJson(s).find("\"rollbacks\": []") != std::string::npos);
  SpikeRollback rb;
  rb.step = 37;
  rb.restored_step = 36;
  rb.metric = "loss";
  rb.value = NAN;
  rb.mean = 1.25;
  rb.zscore = INFINITY;
  rb.skipped_batches = {{0, 36}, {1, 2}};
  s.rollbacks.push_back(rb);
  rapidjson::Document r;
  REQUIRE_FALSE(r.Parse(SummaryToJson(s).c_str()).HasParseError());
  REQUIRE(r["rollbacks"].Size() == 1);
  const auto& j = r["rollbacks"][0];
  CHECK(j["step"].GetInt64() == 37);
  CHECK(j["restored_step"].GetInt64() == 36);
  CHECK(std::string(j["metric"].GetString()) == "loss");
  CHECK(j["value"].IsNull());
  CHECK(j["zscore"].IsNull());
  CHECK(j["mean"].GetDouble() == 1.25);
  REQUIRE(j["skipped_batches"].Size() == 2);
  CHECK(j["skipped_batches"][1][0].GetInt64() == 1);
  CHECK(j["skipped_batches"][1][1].GetInt64() == 2);
}

TEST_CASE("summary file is written whole and {rank} expands") {
  CHECK(ExpandRankPattern("/tmp/s_{rank}_of_{rank}.json", 3) == "/tmp/s_3_of_3.json");
  std::string path = "/tmp/zr_summary_test_" + std::to_string(::getpid()) + ".json";
  TrainSummary s;
  s.final_loss = 1.5;
  WriteSummaryJson(s, path);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  rapidjson::Document d;
  REQUIRE_FALSE(d.Parse(ss.str().c_str()).HasParseError());
  CHECK(d["final_loss"].GetDouble() == 1.5);
  std::remove(path.c_str());
  CHECK_THROWS_AS(WriteSummaryJson(s, "/proc/no/such/summary.json"), zerorun::IoError);
}

}  // TEST_SUITE

TEST_SUITE("unit") {

TEST_CASE("CommReport: bytes per step in Ψ(N-1)/N units against the paper, and the exposed share") {
  TrainSummary s;
  s.rank = 1;
  s.world_size = 4;
  s.zero_stage = 2;
  s.steps = 5;
  s.parameters = 1'048'576;  // Ψ(N-1)/N = 786432 elements = 1.5 MiB in bf16
  // Per step: reduce 1.5 MiB (1 unit), all_gather 1.5 MiB (1 unit), a 16-byte scalar all-reduce.
  s.comm_bytes["reduce"] = {5, 5 * 1'572'864, 0, 0.200};
  s.comm_bytes["all_gather"] = {5, 5 * 1'572'864, 0, 0.100};
  s.comm_bytes["all_reduce"] = {10, 80, 80, 0.050};
  s.timers_ms = {{"backward_allreduce", 70.0}, {"allgather", 35.0}, {"forward", 1000.0}};
  std::string r = CommReport(s, 2);
  INFO(r);
  // 3 MiB + 16 bytes per step; comm (0.35 s / 5) = 70 ms; waited (70 + 35) / 5 = 21 ms; 1 - 21/70 = 70 %.
  CHECK(r.find("per step: 3.00 MiB sent = 2.00Ψ(N-1)/N (ZeRO paper: 2Ψ): all_gather 1.00, reduce 1.00") !=
        std::string::npos);
  CHECK(r.find("all_reduce") == std::string::npos);
  CHECK(r.find("collectives ran 70.0 ms per step; the engine waited 21.0 ms for them (70% hidden") !=
        std::string::npos);
  s.zero_stage = 3;
  CHECK(CommReport(s, 2).find("ZeRO paper: 3Ψ") != std::string::npos);
  s.world_size = 1;
  CHECK(CommReport(s, 2) == "communication: none (one rank)");
}

}  // TEST_SUITE
