// The 16-bit model save: the safetensors writer and reader (round trip with the header bytes parsed
// independently here; atomic publication under injected faults; corrupt files), Engine::Save16BitModel
// at stages 0-3 on 1 and 3 ranks (the file equals GatherParameters() bit for bit and loads into a fresh
// model; mid-window saves change nothing), the stage-3 flag, frozen parameters, and failed saves.
#include <doctest/doctest.h>
#include <rapidjson/document.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "engine_test_util.h"
#include "zerorun/runtime/model_io.h"
#include "zerorun/runtime/safetensors.h"

namespace fs = std::filesystem;
using namespace zrtest;
using runtime::SafetensorsReader;
using runtime::SafetensorsWriter;

namespace {

fs::path TempDir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("zr_save_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string ReadBytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteBytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file from a header text and a data region, the length field written here.
std::string MakeFile(const std::string& header, const std::string& data, uint64_t header_len_field = UINT64_MAX) {
  uint64_t n = header_len_field == UINT64_MAX ? header.size() : header_len_field;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string Bytes(const Tensor& t) { return std::string(static_cast<const char*>(t.data()), t.nbytes()); }

// A tensor of `dtype` whose bytes are distinct, reproducible values.
Tensor Pattern(const Shape& shape, DType dtype, float base) {
  std::vector<float> v(static_cast<size_t>(NumElements(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + 0.37f * static_cast<float>(i) - 1.5f;
  return Tensor::FromVector(v, shape, dtype);
}

// Any files left next to `p` whose name starts with its name and ".tmp."?
bool TempLeft(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
  }
  return false;
}

template <typename E>
std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("safetensors: round trip over F32/F16/BF16 and odd shapes, header bytes checked independently") {
  fs::path d = TempDir("roundtrip");
  const std::vector<std::pair<std::string, Shape>> shapes = {
      {"scalar", {}}, {"empty", {0}}, {"one", {1}}, {"seven", {7}}, {"m.w", {3, 5}}, {"z", {2, 0, 3}}, {"big", {4099}}};
  std::vector<std::pair<std::string, Tensor>> tensors;
  int k = 0;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const auto& [name, shape] : shapes) {
      tensors.emplace_back(std::string(DTypeName(dt)) + "." + name, Pattern(shape, dt, static_cast<float>(k++)));
    }
  }
  fs::path path = d / "t.safetensors";
  runtime::WriteSafetensors(path.string(), tensors, {{"format", "pt"}, {"quote\"key", "a\nb"}});
  CHECK_FALSE(TempLeft(d));

  // The bytes, parsed here without the reader.
  std::string file = ReadBytes(path);
  REQUIRE(file.size() >= 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[static_cast<size_t>(i)]);
  REQUIRE(8 + n <= file.size());
  CHECK((8 + n) % 8 == 0);
  std::string header = file.substr(8, n);
  size_t last = header.find_last_not_of(' ');
  CHECK(header[last] == '}');
  CHECK(n - (last + 1) < 8);  // padding: spaces only, fewer than 8
  rapidjson::Document doc;
  doc.Parse(header.c_str());
  REQUIRE_FALSE(doc.HasParseError());
  CHECK(std::string(doc["__metadata__"]["format"].GetString()) == "pt");
  CHECK(std::string(doc["__metadata__"]["quote\"key"].GetString()) == "a\nb");
  CHECK(doc.MemberCount() == tensors.size() + 1);
  const std::string data = file.substr(8 + n);
  uint64_t at = 0;
  for (const auto& [name, t] : tensors) {
    CAPTURE(name);
    REQUIRE(doc.HasMember(name.c_str()));
    const auto& e = doc[name.c_str()];
    std::string want = t.dtype() == DType::kF32 ? "F32" : t.dtype() == DType::kF16 ? "F16" : "BF16";
    CHECK(std::string(e["dtype"].GetString()) == want);
    Shape shape;
    for (const auto& s : e["shape"].GetArray()) shape.push_back(s.GetInt64());
    CHECK(shape == t.shape());
    uint64_t b = e["data_offsets"][0].GetUint64(), en = e["data_offsets"][1].GetUint64();
    CHECK(b == at);  // contiguous, in the order written
    CHECK(en - b == t.nbytes());
    CHECK(data.substr(b, en - b) == Bytes(t));
    at = en;
  }
  CHECK(at == data.size());

  // And the reader gives back the same bits.
  SafetensorsReader r(path.string());
  CHECK(r.metadata().at("format") == "pt");
  CHECK(r.tensors().size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    Tensor back = r.Read(name);
    CHECK(back.dtype() == t.dtype());
    CHECK(back.shape() == t.shape());
    CHECK(Bytes(back) == Bytes(t));
  }
  // ReadInto converts exactly (bf16 -> fp32 is exact; fp32 -> bf16 rounds as FloatToBF16Bits).
  Tensor f32 = Tensor::Empty({3, 5}, DType::kF32);
  r.ReadInto(*r.Find("bf16.m.w"), f32);
  CHECK(f32.ToVector() == r.Read("bf16.m.w").ToVector());
  Tensor bf = Tensor::Empty({3, 5}, DType::kBF16);
  r.ReadInto(*r.Find("fp32.m.w"), bf);
  std::vector<float> src = r.Read("fp32.m.w").ToVector();
  for (size_t i = 0; i < src.size(); ++i) CHECK(bf.data_as<BFloat16>()[i].bits == FloatToBF16Bits(src[i]));
  fs::remove_all(d);
}

TEST_CASE("safetensors: a failed write leaves the existing file untouched and no temporary file") {
  fs::path d = TempDir("atomic");
  fs::path path = d / "m.safetensors";
  std::vector<std::pair<std::string, Tensor>> old = {{"a", Pattern({5}, DType::kF32, 1)}};
  runtime::WriteSafetensors(path.string(), old);
  const std::string before = ReadBytes(path);
  std::vector<SafetensorsWriter::Entry> entries = {{"w", DType::kBF16, {1000}}, {"v", DType::kF16, {600000}}};
  Tensor w = Pattern({1000}, DType::kBF16, 2), v = Pattern({600000}, DType::kF16, 3);

  SUBCASE("ENOSPC in the middle of the data") {
    runtime::SafetensorsWriterOptions o;
    o.inject_errno = [](std::string_view op, uint64_t offset) { return op == "write" && offset > 0 ? ENOSPC : 0; };
    std::string err = ErrorOf<IoError>([&] {
      SafetensorsWriter wr(path.string(), entries, {}, o);
      wr.Append(w);
      wr.Append(v);  // > 1 MiB in total: the buffer is flushed, the second write fails
      wr.Commit();
    });
    CHECK(err.find(path.string()) != std::string::npos);
    CHECK(err.find(std::strerror(ENOSPC)) != std::string::npos);
  }
  SUBCASE("EIO on fsync") {
    runtime::SafetensorsWriterOptions o;
    o.inject_errno = [](std::string_view op, uint64_t) { return op == "fsync" ? EIO : 0; };
    std::string err = ErrorOf<IoError>([&] {
      SafetensorsWriter wr(path.string(), entries, {}, o);
      wr.Append(w);
      wr.Append(v);
      wr.Commit();
    });
    CHECK(err.find(std::strerror(EIO)) != std::string::npos);
  }
  SUBCASE("not committed (an exception between appends)") {
    {
      SafetensorsWriter wr(path.string(), entries, {});
      wr.Append(w);
      CHECK(fs::exists(wr.temp_path()));
    }
  }
  SUBCASE("the final name is a directory") {
    fs::create_directories(d / "dir.safetensors");
    std::string err = ErrorOf<IoError>([&] {
      runtime::WriteSafetensors((d / "dir.safetensors").string(), old);
    });
    CHECK(err.find("dir.safetensors") != std::string::npos);
    CHECK(fs::is_directory(d / "dir.safetensors"));
  }
  SUBCASE("the parent is a regular file") {
    std::string err = ErrorOf<IoError>([&] { runtime::WriteSafetensors((path / "x.safetensors").string(), old); });
    CHECK(err.find(std::strerror(ENOTDIR)) != std::string::npos);
  }
  CHECK(ReadBytes(path) == before);
  CHECK_FALSE(TempLeft(d));
  fs::remove_all(d);
}

TEST_CASE("safetensors: declarations and appends that do not match are refused naming the tensor") {
  fs::path d = TempDir("declare");
  std::string p = (d / "x.safetensors").string();
  CHECK_THROWS_AS(SafetensorsWriter(p, {{"a", DType::kF32, {2}}, {"a", DType::kF32, {2}}}, {}), InvalidArgument);
  CHECK_THROWS_AS(SafetensorsWriter(p, {{"__metadata__", DType::kF32, {2}}}, {}), InvalidArgument);
  {
    SafetensorsWriter wr(p, {{"a", DType::kF32, {2}}, {"b", DType::kBF16, {3}}}, {});
    std::string err = ErrorOf<InvalidArgument>([&] { wr.Append(Pattern({3}, DType::kF32, 0)); });
    CHECK(err.find("'a'") != std::string::npos);
    wr.Append(Pattern({2}, DType::kF32, 0));
    err = ErrorOf<InvalidArgument>([&] { wr.Commit(); });
    CHECK(err.find("'b'") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(p));
  CHECK_FALSE(TempLeft(d));
  fs::remove_all(d);
}

TEST_CASE("safetensors: corrupt files are refused with CheckpointError naming the file and the field") {
  fs::path d = TempDir("corrupt");
  fs::path good = d / "good.safetensors";
  runtime::WriteSafetensors(good.string(), {{"w", Pattern({4}, DType::kF32, 0)}, {"b", Pattern({2}, DType::kBF16, 0)}});
  const std::string file = ReadBytes(good);
  const std::string data16(16, 'x');  // the data region of a hand-made file: 16 bytes
  struct Case {
    std::string what;
    std::string bytes;
    std::string expect;  // in the message, besides the path
  };
  std::vector<Case> cases = {
      {"shorter than 8 bytes", file.substr(0, 5), "shorter than the 8-byte"},
      {"truncated data", file.substr(0, file.size() - 4), "data region"},
      {"header length beyond the file", MakeFile("{}", "", 64), "runs past the end"},
      {"absurd header length", MakeFile("{}", "", uint64_t{1} << 40), "above the"},
      {"bad JSON", MakeFile("{\"w\": {", data16), "not valid JSON"},
      {"not an object", MakeFile("[1, 2]      ", ""), "not a JSON object"},
      {"unknown dtype", MakeFile(R"({"w":{"dtype":"F33","shape":[4],"data_offsets":[0,16]}})", data16), "\"F33\""},
      {"offsets out of range", MakeFile(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", data16),
       "out of range"},
      {"shape does not match the span", MakeFile(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", data16),
       "needs 12 bytes"},
      {"overlapping", MakeFile(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("v":{"dtype":"F32","shape":[3],"data_offsets":[4,16]}})", data16), "overlap"},
      {"hole", MakeFile(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("v":{"dtype":"F16","shape":[2],"data_offsets":[12,16]}})", data16), "hole"},
      {"data not covered", MakeFile(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data16), "cover 8"},
      {"negative shape", MakeFile(R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", data16), "shape"},
      {"missing offsets", MakeFile(R"({"w":{"dtype":"F32","shape":[4]}})", data16), "data_offsets"},
      {"duplicate name", MakeFile(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                  R"("w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data16), "twice"},
      {"bad metadata", MakeFile(R"({"__metadata__":{"a":1}})", ""), "__metadata__.a"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    fs::path p = d / "bad.safetensors";
    WriteBytes(p, c.bytes);
    std::string err = ErrorOf<CheckpointError>([&] { SafetensorsReader r(p.string()); });
    CHECK(err.find(p.string()) != std::string::npos);
    CHECK_MESSAGE(err.find(c.expect) != std::string::npos, err);
    if (c.what.find("dtype") != std::string::npos || c.what.find("range") != std::string::npos) {
      CHECK(err.find("'w'") != std::string::npos);
    }
  }
  std::string err = ErrorOf<CheckpointError>([&] { SafetensorsReader r((d / "absent").string()); });
  CHECK(err.find("absent") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("Save16BitModel: stages 0-3 x worlds 1 and 3, saved mid-window: the file equals GatherParameters()") {
  struct Case {
    int stage, world;
    DType dtype;
  };
  const std::vector<Case> cases = {{0, 1, DType::kF32}, {1, 1, DType::kBF16}, {2, 1, DType::kF16},
                                   {3, 1, DType::kF32}, {0, 3, DType::kBF16}, {1, 3, DType::kF32},
                                   {2, 3, DType::kBF16}, {3, 3, DType::kBF16}};
  fs::path d = TempDir("engine");
  for (const Case& c : cases) {
    CAPTURE(c.stage);
    CAPTURE(c.world);
    CAPTURE(DTypeName(c.dtype));
    const std::string dir = (d / Format("s{}w{}", c.stage, c.world)).string();  // created by the save
    // Per run: final parameters per rank (after finishing the window), with and without the save.
    auto run = [&](bool save) {
      std::vector<std::vector<std::string>> finals(static_cast<size_t>(c.world));
      std::mutex mu;
      RunSpec s;
      s.world = c.world;
      s.stage = c.stage;
      s.micro = 2;
      s.gas = 2;
      s.dtype = c.dtype;
      s.zero_json = R"(, "stage3_gather_16bit_weights_on_model_save": true, "stage3_param_persistence_threshold": 20,
                        "enable_sanity_checks": true)";
      comm::RunLocalRanks(c.world, [&](comm::Communicator& comm) {
        runtime::Config cfg = LoadSpecConfig(s);
        gpt::GptConfig gc = TinyGpt(c.dtype);
        gpt::Gpt model(gc);
        runtime::EngineOptions eo;
        eo.init_seed = 11;
        runtime::Engine engine(model, cfg, comm, eo);
        auto micro = [&](int step, int m) {
          auto [x, y] = MicroBatch(step, m, comm.rank(), c.world, s.micro, s.gas, gc.seq_len, gc.vocab_size);
          engine.Forward(x, y);
          engine.Backward();
          engine.Step();
        };
        for (int step = 0; step < 2; ++step) {
          for (int m = 0; m < 2; ++m) micro(step, m);
        }
        micro(2, 0);  // inside the third window (DeepSpeed case 41)
        if (save) {
          CHECK(engine.Save16BitModel(dir));
          // Every rank sees the complete file as soon as its call returns.
          std::vector<Tensor> gathered = engine.GatherParameters();
          std::vector<nn::Parameter*> params = model.Parameters();
          SafetensorsReader r(dir + "/model.safetensors");
          CHECK(r.metadata().at("format") == "pt");
          CHECK(r.metadata().at("zerorun_global_steps") == "2");
          CHECK(r.tensors().size() == params.size());  // tied lm head saved once (under wte.weight)
          for (size_t i = 0; i < params.size() && i < gathered.size(); ++i) {
            Tensor t = r.Read(params[i]->name());
            CHECK(t.dtype() == c.dtype);
            CHECK(t.shape() == params[i]->shape());
            CHECK(Bytes(t) == Bytes(gathered[i]));
          }
          // A fresh model (no values yet) loads the file to the same bits.
          if (comm.rank() == c.world - 1) {
            gpt::Gpt fresh(gc);
            runtime::LoadSafetensorsIntoModel(fresh, dir + "/model.safetensors");
            std::vector<nn::Parameter*> fp = fresh.Parameters();
            for (size_t i = 0; i < fp.size(); ++i) CHECK(Bytes(fp[i]->engine_data()) == Bytes(gathered[i]));
          }
        }
        micro(2, 1);  // finishes the window
        std::vector<std::string> mine;
        for (const Tensor& t : engine.GatherParameters()) mine.push_back(Bytes(t));
        std::lock_guard<std::mutex> lock(mu);
        finals[static_cast<size_t>(comm.rank())] = std::move(mine);
      });
      return finals;
    };
    auto with_save = run(true);
    auto without = run(false);
    CHECK(with_save == without);  // the save disturbed nothing
    CHECK_FALSE(TempLeft(dir));
  }
  fs::remove_all(d);
}

TEST_CASE("Save16BitModel: a temporary left by a writer killed mid-save is ignored by loads and removed by the next save") {
  fs::path d = TempDir("leftover");
  // A pid that no longer runs (a child that exited and was reaped), and one that does (this process's
  // parent stands in for a live writer of another process).
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  const fs::path dead = d / ("model.safetensors.tmp." + std::to_string(child));
  const fs::path live = d / ("model.safetensors.tmp." + std::to_string(::getppid()));
  const fs::path other = d / "other.safetensors.tmp.1";
  for (const fs::path& p : {dead, live, other}) std::ofstream(p) << "half a file";
  comm::RunLocalRanks(1, [&](comm::Communicator& comm) {
    RunSpec s;
    runtime::Config cfg = LoadSpecConfig(s);
    gpt::Gpt model(TinyGpt(DType::kF32));
    runtime::EngineOptions eo;
    eo.init_seed = 3;
    runtime::Engine engine(model, cfg, comm, eo);
    CHECK(engine.Save16BitModel(d.string()));
    gpt::Gpt loaded(TinyGpt(DType::kF32));
    runtime::LoadSafetensorsIntoModel(loaded, (d / "model.safetensors").string());
  });
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(live));   // its writer may still be running
  CHECK(fs::exists(other));  // another file's temporary
  CHECK(fs::exists(d / "model.safetensors"));
  fs::remove_all(d);
}

TEST_CASE("Save16BitModel: stage 3 without stage3_gather_16bit_weights_on_model_save returns false everywhere") {
  fs::path d = TempDir("noflag");
  comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
    RunSpec s;
    s.world = 2;
    s.stage = 3;
    s.micro = 2;
    runtime::Config cfg = LoadSpecConfig(s);
    gpt::Gpt model(TinyGpt(DType::kF32));
    runtime::EngineOptions eo;
    eo.init_seed = 3;
    runtime::Engine engine(model, cfg, comm, eo);
    // Only rank 1 calls it twice: there is no collective inside, so nothing hangs.
    CHECK_FALSE(engine.Save16BitModel((d / "out").string()));
    if (comm.rank() == 1) CHECK_FALSE(engine.Save16BitModel((d / "out").string()));
    auto [x, y] = MicroBatch(0, 0, comm.rank(), 2, 2, 1, 8, 16);
    engine.Forward(x, y);
    engine.Backward();
    engine.Step();
  });
  CHECK_FALSE(fs::exists(d / "out"));
  fs::remove_all(d);
}

TEST_CASE("Save16BitModel: exclude_frozen_parameters leaves frozen ones out; strict loading then names them") {
  fs::path d = TempDir("frozen");
  for (int stage : {0, 3}) {
    CAPTURE(stage);
    comm::RunLocalRanks(2, [&](comm::Communicator& comm) {
      RunSpec s;
      s.world = 2;
      s.stage = stage;
      s.micro = 2;
      s.zero_json = R"(, "stage3_gather_16bit_weights_on_model_save": true)";
      runtime::Config cfg = LoadSpecConfig(s);
      gpt::Gpt model(TinyGpt(DType::kF32));
      model.Initialize(4);
      model.FindParameter("wpe.weight")->set_requires_grad(false);
      runtime::Engine engine(model, cfg, comm);
      auto [x, y] = MicroBatch(0, 0, comm.rank(), 2, 2, 1, 8, 16);
      engine.Forward(x, y);
      engine.Backward();
      engine.Step();
      const std::string dir = (d / Format("s{}", stage)).string();
      CHECK(engine.Save16BitModel(dir, "all.safetensors"));
      CHECK(engine.Save16BitModel(dir, "trainable.safetensors", /*exclude_frozen_parameters=*/true));
      std::vector<Tensor> gathered = engine.GatherParameters();
      if (comm.rank() != 1) return;
      SafetensorsReader all(dir + "/all.safetensors"), trainable(dir + "/trainable.safetensors");
      CHECK(all.Find("wpe.weight") != nullptr);
      CHECK(trainable.Find("wpe.weight") == nullptr);
      CHECK(trainable.tensors().size() + 1 == all.tensors().size());
      gpt::Gpt fresh(TinyGpt(DType::kF32));
      std::string err = ErrorOf<CheckpointError>(
          [&] { runtime::LoadSafetensorsIntoModel(fresh, dir + "/trainable.safetensors"); });
      CHECK(err.find("missing: wpe.weight") != std::string::npos);
      fresh.Initialize(99);
      runtime::LoadSafetensorsIntoModel(fresh, dir + "/trainable.safetensors", /*strict=*/false);
      std::vector<nn::Parameter*> fp = fresh.Parameters();
      for (size_t i = 0; i < fp.size(); ++i) {
        if (fp[i]->name() == "wpe.weight") continue;
        CHECK(Bytes(fp[i]->engine_data()) == Bytes(gathered[i]));
      }
    });
  }
  fs::remove_all(d);
}

TEST_CASE("LoadSafetensorsIntoModel: unexpected and mis-shaped tensors are named; dtypes convert exactly") {
  fs::path d = TempDir("load");
  gpt::Gpt src(TinyGpt(DType::kF32));
  src.Initialize(5);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (nn::Parameter* p : src.Parameters()) tensors.emplace_back(p->name(), p->engine_data());
  runtime::WriteSafetensors((d / "f32.safetensors").string(), tensors);
  // fp32 file into a bf16 model: round to nearest even.
  gpt::Gpt bf(TinyGpt(DType::kBF16));
  runtime::LoadSafetensorsIntoModel(bf, (d / "f32.safetensors").string());
  for (nn::Parameter* p : bf.Parameters()) {
    std::vector<float> want = src.FindParameter(p->name())->engine_data().ToVector();
    const BFloat16* got = p->engine_data().data_as<BFloat16>();
    for (size_t i = 0; i < want.size(); ++i) REQUIRE(got[i].bits == FloatToBF16Bits(want[i]));
  }
  // An extra tensor.
  auto extra = tensors;
  extra.emplace_back("head.extra", Pattern({2}, DType::kF32, 0));
  runtime::WriteSafetensors((d / "extra.safetensors").string(), extra);
  gpt::Gpt m(TinyGpt(DType::kF32));
  std::string err = ErrorOf<CheckpointError>(
      [&] { runtime::LoadSafetensorsIntoModel(m, (d / "extra.safetensors").string()); });
  CHECK(err.find("unexpected: head.extra") != std::string::npos);
  CHECK(err.find("extra.safetensors") != std::string::npos);
  runtime::LoadSafetensorsIntoModel(m, (d / "extra.safetensors").string(), /*strict=*/false);
  // A tensor of the wrong shape fails even when not strict.
  auto bad = tensors;
  bad[1].second = Pattern({3}, DType::kF32, 0);
  runtime::WriteSafetensors((d / "bad.safetensors").string(), bad);
  err = ErrorOf<CheckpointError>(
      [&] { runtime::LoadSafetensorsIntoModel(m, (d / "bad.safetensors").string(), /*strict=*/false); });
  CHECK(err.find("'" + bad[1].first + "' has shape [3]") != std::string::npos);
  fs::remove_all(d);
}

TEST_CASE("Save16BitModel: a failed save throws IoError on every rank, keeps the old file, and training goes on") {
  fs::path d = TempDir("fail");
  WriteBytes(d / "plain_file", "not a directory");
  fs::create_directories(d / "out" / "model.safetensors");  // the final name is a directory
  std::mutex mu;
  std::vector<std::string> errors;
  comm::RunLocalRanks(3, [&](comm::Communicator& comm) {
    RunSpec s;
    s.world = 3;
    s.stage = 3;
    s.micro = 2;
    s.dtype = DType::kBF16;
    s.zero_json = R"(, "stage3_gather_16bit_weights_on_model_save": true, "stage3_param_persistence_threshold": 0)";
    runtime::Config cfg = LoadSpecConfig(s);
    gpt::Gpt model(TinyGpt(DType::kBF16));
    runtime::EngineOptions eo;
    eo.init_seed = 8;
    runtime::Engine engine(model, cfg, comm, eo);
    // Opening fails (parent is a file): nobody starts gathering.
    std::string e1 = ErrorOf<IoError>([&] { engine.Save16BitModel((d / "plain_file" / "sub").string()); });
    // Publishing fails (rename onto a directory) after every parameter was gathered and written.
    std::string e2 = ErrorOf<IoError>([&] { engine.Save16BitModel((d / "out").string()); });
    auto [x, y] = MicroBatch(0, 0, comm.rank(), 3, 2, 1, 8, 16);
    engine.Forward(x, y);  // the ranks' gathers are still in step
    engine.Backward();
    engine.Step();
    std::lock_guard<std::mutex> lock(mu);
    errors.push_back(e1);
    errors.push_back(e2);
  });
  REQUIRE(errors.size() == 6);
  for (size_t i = 0; i < errors.size(); ++i) {
    INFO(errors[i]);
    CHECK(errors[i].find(i % 2 == 0 ? "plain_file" : "model.safetensors") != std::string::npos);
  }
  CHECK(fs::is_directory(d / "out" / "model.safetensors"));
  CHECK_FALSE(TempLeft(d / "out"));
  fs::remove_all(d);
}

}  // TEST_SUITE
