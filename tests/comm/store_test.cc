// The rendezvous store: semantics of every operation, timeouts, the job token, garbage on the socket,
// many clients at once, and shutdown with requests in flight. Server and clients run in this process.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
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
  // GetExisting: present keys with their values, absent ones left out, no waiting for them
  Stopwatch sw;
  auto got = s.GetExisting({"a", "absent", "counter"}, Millis(5000));
  CHECK(got.size() == 2);
  CHECK(got["a"] == std::string("x\0y", 3));
  CHECK(got["counter"] == "3");
  CHECK(s.GetExisting({"absent"}, Millis(5000)).empty());
  CHECK(sw.ElapsedSeconds() < 2.0);
}

// A TCP server that completes the HELLO handshake and then never answers (a frozen store host).
struct SilentServer {
  int listen_fd = -1;
  int port = 0;
  std::vector<int> conns;
  std::thread thread;
  std::atomic<bool> stop{false};
  SilentServer() {
    listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(::listen(listen_fd, 16) == 0);
    socklen_t len = sizeof(a);
    ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    thread = std::thread([this] {
      while (!stop) {
        pollfd p{listen_fd, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        int fd = ::accept(listen_fd, nullptr, nullptr);
        if (fd < 0) continue;
        char buf[8192];
        ::recv(fd, buf, sizeof(buf), 0);  // the HELLO
        std::string ok = proto::Writer(proto::kOk).Finish();
        ::send(fd, ok.data(), ok.size(), MSG_NOSIGNAL);
        conns.push_back(fd);  // then silence
      }
    });
  }
  ~SilentServer() {
    stop = true;
    thread.join();
    for (int fd : conns) ::close(fd);
    ::close(listen_fd);
  }
};

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

TEST_CASE("store: a server that stops answering is StoreUnresponsiveError, after the client's grace, not a hang") {
  SilentServer silent;
  // Set waits one reply timeout (the store's timeout, 300 ms here)
  auto c = Client(silent.port, kToken, Millis(300));
  Stopwatch sw;
  try {
    c->Set("k", "v");
    FAIL("no error from a silent server");
  } catch (const StoreUnresponsiveError& e) {
    std::string m = e.what();
    CHECK(m.find("did not answer within 300 ms") != std::string::npos);
    CHECK(m.find("rank 0") != std::string::npos);
    CHECK(m.find(Format("127.0.0.1:{}", silent.port)) != std::string::npos);
  }
  CHECK(sw.ElapsedSeconds() < 3.0);
  CHECK_THROWS_WITH_AS(c->Get("k", Millis(10)), doctest::Contains("lost earlier"), CommError);
  // GetExisting is bounded by its own timeout even here
  auto d = Client(silent.port, kToken, Millis(60000));
  sw.Restart();
  CHECK_THROWS_AS(d->GetExisting({"a", "b"}, Millis(300)), StoreUnresponsiveError);
  CHECK(sw.ElapsedSeconds() < 3.0);
}

TEST_CASE("store: Interrupt() fails a call blocked on an unresponsive server promptly") {
  SilentServer silent;
  auto c = Client(silent.port, kToken, Millis(60000));  // would wait a minute for the reply
  std::atomic<bool> comm_error{false}, unresponsive{false};
  Stopwatch sw;
  std::thread blocked([&] {
    try {
      c->Get("never", Millis(60000));
    } catch (const StoreUnresponsiveError&) {
      unresponsive = true;
    } catch (const CommError&) {
      comm_error = true;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  c->Interrupt();
  blocked.join();
  CHECK(comm_error.load());
  CHECK_FALSE(unresponsive.load());
  CHECK(sw.ElapsedSeconds() < 5.0);
  CHECK_THROWS_WITH_AS(c->Set("x", "y"), doctest::Contains("shut down by this process"), CommError);
}

TEST_CASE("store: out of file descriptors, the server backs off instead of spinning, then serves the client") {
  auto server = StartServer();
  auto good = Client(server->port());
  const std::string hello = proto::Writer(proto::kHello).U32(proto::kMagic).Str(kToken).Finish();
  const int port = server->port();
  // Exhaust this process's descriptors; then a client (a forked process, with descriptors of its
  // own) knocks: the kernel queues it and accept4 fails with EMFILE until descriptors are free.
  std::vector<int> hog;
  for (;;) {
    int fd = ::dup(0);
    if (fd < 0) break;
    hog.push_back(fd);
  }
  pid_t child = ::fork();
  if (child == 0) {  // async-signal-safe calls only; its copy of the table needs a free slot
    for (size_t i = 0; i < 4 && i < hog.size(); ++i) ::close(hog[i]);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) _exit(2);
    ::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
    char hdr[5];
    size_t got = 0;
    while (got < sizeof(hdr)) {
      ssize_t n = ::recv(fd, hdr + got, sizeof(hdr) - got, 0);
      if (n <= 0) _exit(3);
      got += static_cast<size_t>(n);
    }
    _exit(hdr[4] == proto::kOk ? 0 : 4);
  }
  REQUIRE(child > 0);
  rusage before{}, after{};
  ::getrusage(RUSAGE_SELF, &before);
  Stopwatch sw;
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  ::getrusage(RUSAGE_SELF, &after);
  const double cpu_s = (after.ru_utime.tv_sec - before.ru_utime.tv_sec) + (after.ru_stime.tv_sec - before.ru_stime.tv_sec) +
                       1e-6 * ((after.ru_utime.tv_usec - before.ru_utime.tv_usec) + (after.ru_stime.tv_usec - before.ru_stime.tv_usec));
  const double wall_s = sw.ElapsedSeconds();
  for (int fd : hog) ::close(fd);
  INFO("server CPU " << cpu_s << " s in " << wall_s << " s");
  CHECK(cpu_s < 0.3 * wall_s);  // a spinning accept loop burns a core
  // Descriptors back: the queued client is accepted and answered, and the others never noticed.
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  good->Set("still", "served");
  CHECK(good->Get("still") == "served");
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

TEST_SUITE("multiproc") {

TEST_CASE("store: a client stopped (SIGSTOP) past its reply deadline reads the reply that arrived instead of timing out") {
  zerorun::test::MultiprocOptions o;
  o.world_size = 2;
  o.deadline_s = 60;
  auto results = zerorun::test::RunMultiproc(o, [](int rank, int) {
    const int port = std::atoi(std::getenv("MASTER_PORT"));
    std::unique_ptr<StoreServer> server;
    if (rank == 0) {
      StoreServerOptions so;
      so.host = "127.0.0.1";
      so.port = port;
      so.token = kToken;
      server = std::make_unique<StoreServer>(so);
    }
    // every reply is due within 300 ms; each stop below lasts 600 ms
    auto c = Client(port, kToken, Millis(300), Millis(10000));
    if (rank == 1) {
      c->Set("pid", std::to_string(::getpid()));
      int64_t calls = 0;
      try {
        while (!c->Check({"done"})) {
          c->Add("calls", 1);
          ++calls;
        }
      } catch (const Error& e) {
        FAIL_CHECK("after " << calls << " calls: " << std::string(e.what()));
      }
      c->Set("finished", std::to_string(calls));
    } else {
      const pid_t peer = static_cast<pid_t>(std::stoll(c->Get("pid", Millis(10000))));
      std::mt19937 rng(11);
      for (int i = 0; i < 6; ++i) {  // stop it at random moments of its calls
        std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 80));
        ::kill(peer, SIGSTOP);
        std::this_thread::sleep_for(std::chrono::milliseconds(600));
        ::kill(peer, SIGCONT);
      }
      c->Set("done", "1");
      CHECK(std::stoll(c->Get("finished", Millis(10000))) > 0);
    }
  });
  if (!zerorun::test::IsMultiprocChild()) CHECK(zerorun::test::AllSucceeded(results));
}

}  // TEST_SUITE
