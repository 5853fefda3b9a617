// CsvMonitor writes DeepSpeed's csv_monitor layout and reports unwritable paths clearly.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "zerorun/core/error.h"
#include "zerorun/runtime/monitor.h"

namespace fs = std::filesystem;
using zerorun::runtime::CsvMonitor;

namespace {
std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

TEST_SUITE("unit") {

TEST_CASE("csv monitor: one file per event, header then step,value rows") {
  fs::path base = fs::temp_directory_path() / ("zr_csv_" + std::to_string(::getpid()));
  fs::remove_all(base);
  {
    CsvMonitor mon(base.string(), "job1");
    mon.Write({{"Train/Samples/lr", 0.001, 8}, {"Train/Samples/loss_scale", 65536, 8}});
    mon.Write({{"Train/Samples/lr", 0.0005, 16}});
    mon.Flush();
    CHECK(mon.PathFor("Train/Samples/lr") == (base / "job1" / "Train_Samples_lr.csv").string());
  }
  CHECK(ReadAll((base / "job1" / "Train_Samples_lr.csv").string()) == "step,lr\n8,0.001\n16,0.0005\n");
  CHECK(ReadAll((base / "job1" / "Train_Samples_loss_scale.csv").string()) == "step,loss_scale\n8,65536\n");
  {
    // A second monitor appends without repeating the header.
    CsvMonitor mon(base.string(), "job1");
    mon.Write({{"Train/Samples/lr", 0.25, 24}});
  }
  CHECK(ReadAll((base / "job1" / "Train_Samples_lr.csv").string()) == "step,lr\n8,0.001\n16,0.0005\n24,0.25\n");
  fs::remove_all(base);
}

TEST_CASE("csv monitor: an unusable output path is an IoError naming it") {
  CHECK_THROWS_WITH_AS(CsvMonitor("/proc/zr_no_such_dir", "job"), doctest::Contains("/proc/zr_no_such_dir"),
                       zerorun::IoError);
}

}  // TEST_SUITE
