// The rendezvous store: semantics of every operation, timeouts, the job token, garbage on the socket,
// many clients at once, and shutdown with requests in flight. Server and clients run in this process.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/multiproc.h"
#include "zerorun/comm/store.h"
#include "zerorun/comm/store_protocol.h"
#include "zerorun/comm/tcp_store.h"
#include "zerorun/core/error.h"
#include "zerorun/core/timer.h"

using namespace zerorun;
using namespace zerorun::comm;

namespace {

constexpr const char* kToken = "secret-token";

std::unique_ptr<StoreServer> StartServer() {
  StoreServerOptions o;
  o.host = "127.0.0.1";
  o.token = kToken;
  return std::make_unique<StoreServer>(o);
}

std::unique_ptr<TcpStore> Client(int port, const std::string& token = kToken, Millis timeout = Millis(5000),
                                 Millis connect_timeout = Millis(3000)) {
  TcpStoreOptions o;
  o.port = port;
  o.token = token;
  o.timeout = timeout;
  o.connect_timeout = connect_timeout;
  return std::make_unique<TcpStore>(o);
}

int RawConnect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  return fd;
}

// Reads until the peer closes (or 5 s pass); returns whether it closed.
bool ClosedByPeer(int fd) {
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

// Every Store implementation must pass the same semantic checks.
void CheckSemantics(Store& s) {
  s.Set("a", "1");
  CHECK(s.Get("a") == "1");
  s.Set("a", std::string("x\0y", 3));  // binary-safe, overwrites
  CHECK(s.Get("a") == std::string("x\0y", 3));
  CHECK(s.Add("counter", 5) == 5);
  CHECK(s.Add("counter", -2) == 3);
  CHECK(s.Get("counter") == "3");
  CHECK_THROWS_AS(s.Add("a", 1), InvalidArgument);
  CHECK(s.CompareSet("cas", "", "first") == "first");         // absent + "" expected: stores
  CHECK(s.CompareSet("cas", "wrong", "second") == "first");   // mismatch: unchanged
  CHECK(s.CompareSet("cas", "first", "second") == "second");  // match: swapped
  CHECK(s.CompareSet("absent", "x", "y") == "");              // absent + non-empty expected: nothing
  CHECK_FALSE(s.Check({"absent"}));
  CHECK(s.Check({"a", "counter", "cas"}));
  CHECK_FALSE(s.Check({"a", "absent"}));
  CHECK(s.Delete("cas"));
  CHECK_FALSE(s.Delete("cas"));
  CHECK_FALSE(s.Check({"cas"}));
  CHECK(s.NumKeys() >= 2);
  s.Wait({"a", "counter"}, Millis(100));
  CHECK_THROWS_AS(s.Set("", "v"), InvalidArgument);
}

}  // namespace

TEST_SUITE("unit") {

TEST_CASE("store: HashStore and PrefixStore semantics") {
  auto base = std::make_shared<HashStore>();
  CheckSemantics(*base);
  PrefixStore p("grp", base);
  CheckSemantics(p);
  // The prefix isolates keys: "grp/a" in the base, and another prefix does not see it.
  CHECK(base->Get("grp/a") == std::string("x\0y", 3));
  PrefixStore q("other", base);
  CHECK_FALSE(q.Check({"a"}));
  q.Set("a", "q");
  CHECK(p.Get("a") == std::string("x\0y", 3));
}

TEST_CASE("store: TcpStore semantics over a real server") {
  auto server = StartServer();
  auto c = Client(server->port());
  CheckSemantics(*c);
  auto shared = std::shared_ptr<Store>(Client(server->port()));
  PrefixStore p("g1", shared);
  CheckSemantics(p);
  CHECK(c->Get("g1/counter") == "3");
  // A value at the size limit passes; one byte more is refused by the client.
  std::string big(1 << 20, 'v');
  c->Set("big", big);
  CHECK(c->Get("big") == big);
  CHECK_THROWS_AS(c->Set("toolong", std::string(kStoreMaxValueBytes + 1, 'x')), InvalidArgument);
  CHECK_THROWS_AS(c->Set(std::string(kStoreMaxKeyBytes + 1, 'k'), "v"), InvalidArgument);
}

TEST_CASE("store: blocking Get and Wait wake on Set and time out naming the key") {
  auto server = StartServer();
  auto c = Client(server->port());
  auto d = Client(server->port());
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    d->Set("late", "v");
    d->Set("late2", "w");
  });
  CHECK(c->Get("late", Millis(5000)) == "v");
  c->Wait({"late", "late2"}, Millis(5000));
  setter.join();

  Stopwatch sw;
  try {
    c->Get("never", Millis(200));
    FAIL("no timeout");
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    CHECK(m.find("never") != std::string::npos);
    CHECK(m.find(Format("127.0.0.1:{}", server->port())) != std::string::npos);
  }
  CHECK_THROWS_AS(c->Wait({"late", "never2"}, Millis(100)), TimeoutError);
  CHECK(sw.ElapsedSeconds() < 5.0);
  CHECK(c->Get("late") == "v");  // the connection is still usable after timeouts
}

TEST_CASE("store: many client threads hammering add") {
  auto server = StartServer();
  constexpr int kThreads = 16, kAdds = 200;
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        auto c = Client(server->port());
        for (int i = 0; i < kAdds; ++i) c->Add("hammer", t % 2 ? 1 : 2);
        c->Add("finished", 1);
      } catch (const std::exception&) {
        ++errors;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(errors.load() == 0);
  auto c = Client(server->port());
  CHECK(c->Get("hammer") == std::to_string(kAdds * (kThreads / 2) * 3));
  CHECK(c->Get("finished") == std::to_string(kThreads));
}

TEST_CASE("store: one client shared by threads") {
  auto server = StartServer();
  std::shared_ptr<Store> c = Client(server->port());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) c->Add("shared", 1);
    });
  }
  for (auto& t : threads) t.join();
  CHECK(c->Get("shared") == "800");
}

TEST_CASE("store: wrong or missing token is refused; the server keeps serving") {
  auto server = StartServer();
  try {
    Client(server->port(), "wrong");
    FAIL("connected with a wrong token");
  } catch (const CommError& e) {
    CHECK(std::string(e.what()).find("refused") != std::string::npos);
    CHECK(std::string(e.what()).find(Format("127.0.0.1:{}", server->port())) != std::string::npos);
  }
  CHECK_THROWS_AS(Client(server->port(), ""), CommError);
  // A raw connection that skips HELLO and sends a request is dropped.
  int fd = RawConnect(server->port());
  std::string set = proto::Writer(proto::kSet).Str("k").Str("v").Finish();
  ::send(fd, set.data(), set.size(), MSG_NOSIGNAL);
  CHECK(ClosedByPeer(fd));
  ::close(fd);
  auto c = Client(server->port());
  CHECK_FALSE(c->Check({"k"}));
  CHECK(server->connections_refused() >= 3);
}

TEST_CASE("store: garbage bytes close only that connection") {
  auto server = StartServer();
  auto good = Client(server->port());
  good->Set("alive", "1");
  std::mt19937 rng(7);
  // Random bytes before HELLO, a huge length prefix, and garbage after a valid HELLO.
  for (int trial = 0; trial < 20; ++trial) {
    int fd = RawConnect(server->port());
    std::string junk(1 + rng() % 3000, '\0');
    for (auto& ch : junk) ch = static_cast<char>(rng());
    if (trial % 3 == 1) junk = std::string("\xff\xff\xff\x7f", 4) + junk;
    if (trial % 3 == 2) {
      junk = proto::Writer(proto::kHello).U32(proto::kMagic).Str(kToken).Finish() +
             std::string("\x05\x00\x00\x00\x63zzzz", 9);  // unknown opcode 0x63
    }
    ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    CHECK(ClosedByPeer(fd));
    ::close(fd);
  }
  // A truncated frame followed by silence is not served but does not block others.
  int fd = RawConnect(server->port());
  ::send(fd, "\x10\x00", 2, MSG_NOSIGNAL);
  CHECK(good->Get("alive") == "1");
  good->Set("still", "ok");
  CHECK(good->Get("still") == "ok");
  ::close(fd);
}

TEST_CASE("store: server shutdown fails requests in flight promptly") {
  auto server = StartServer();
  auto c = Client(server->port(), kToken, Millis(5000), Millis(300));
  std::atomic<bool> got_error{false};
  Stopwatch sw;
  std::thread waiter([&] {
    try {
      c->Get("never", Millis(20000));
    } catch (const CommError& e) {
      got_error = std::string(e.what()).find("never") != std::string::npos;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server->Stop();
  waiter.join();
  CHECK(got_error.load());
  CHECK(sw.ElapsedSeconds() < 5.0);
  // Later calls fail with a CommError that names the server (no hang: the connect deadline applies).
  CHECK_THROWS_AS(c->Set("x", "y"), CommError);
}

TEST_CASE("store: clients retry until the server starts") {
  int port = zerorun::test::PickFreePort();
  std::unique_ptr<StoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    StoreServerOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    o.token = kToken;
    server = std::make_unique<StoreServer>(o);
  });
  auto c = Client(port);
  c->Set("k", "v");
  CHECK(c->Get("k") == "v");
  starter.join();
  // Nobody listening at all: CommError after the connect timeout, naming host:port.
  TcpStoreOptions o;
  o.port = zerorun::test::PickFreePort();
  o.connect_timeout = Millis(200);
  try {
    TcpStore s(o);
    FAIL("connected to nothing");
  } catch (const CommError& e) {
    CHECK(std::string(e.what()).find(Format("127.0.0.1:{}", o.port)) != std::string::npos);
  }
}

TEST_CASE("store: on-disconnect keys record a client's death") {
  auto server = StartServer();
  auto watcher = Client(server->port());
  {
    auto dying = Client(server->port());
    dying->SetOnDisconnect("dead", "rank 3 (host h)");
  }  // connection closes without ClearOnDisconnect
  CHECK(watcher->Get("dead", Millis(3000)) == "rank 3 (host h)");
  {
    auto polite = Client(server->port());
    polite->SetOnDisconnect("dead2", "x");
    polite->ClearOnDisconnect();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(watcher->Check({"dead2"}));
  {  // the first death wins: an existing key is not overwritten
    auto second = Client(server->port());
    second->SetOnDisconnect("dead", "rank 5");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(watcher->Get("dead") == "rank 3 (host h)");
}

}  // TEST_SUITE
