// The event-driven HTTP layer (server/http_server.h) over loopback sockets,
// with a handler of the test's own: keep-alive, chunked streams answered
// from another thread, the limits (408 for a request that does not arrive,
// 413, 431, 400), the connection cap (the oldest idle connection makes room;
// 503 when none is idle), half-sent requests that do not hold up others,
// a client that goes away or does not read (on_gone), and the drain.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "server/http_server.h"

namespace nextn::server {
namespace {

using namespace std::chrono_literals;

// A blocking loopback client socket; reads wait at most `timeout_ms`.
class Client {
 public:
  explicit Client(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Client() {
    if (fd_ >= 0) close(fd_);
  }
  bool connected() const { return connected_; }
  void send_all(const std::string& s) {
    size_t at = 0;
    while (at < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + at, s.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return;
      at += size_t(n);
    }
  }
  // Everything until the peer closes or nothing comes for timeout_ms.
  std::string read_until_quiet(int timeout_ms = 3000) {
    std::string out;
    char buf[65536];
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, timeout_ms) <= 0) return out;
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return out;
      out.append(buf, size_t(n));
    }
  }
  // One whole response with a Content-Length (keep-alive connections).
  std::string read_response(int timeout_ms = 5000) {
    std::string out;
    char buf[4096];
    for (;;) {
      const size_t head_end = out.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        const size_t cl = out.find("Content-Length: ");
        if (cl != std::string::npos && cl < head_end) {
          const size_t len = std::stoul(out.substr(cl + 16));
          if (out.size() >= head_end + 4 + len) return out;
        }
      }
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, timeout_ms) <= 0) return out;
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return out;
      out.append(buf, size_t(n));
    }
  }
  // True when the server closed the connection (end of stream) within timeout_ms.
  bool closed_by_peer(int timeout_ms = 3000) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    char c;
    return recv(fd_, &c, 1, MSG_PEEK) <= 0;
  }
  void shutdown_write() { shutdown(fd_, SHUT_WR); }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

std::string get(const std::string& path) { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n"; }
std::string post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}
int status_of(const std::string& response) {
  return response.rfind("HTTP/1.1 ", 0) == 0 ? std::stoi(response.substr(9, 3)) : 0;
}

// A server whose handler answers "/echo" with the body, "/stream" with three
// chunks from another thread, and parks "/park" until the test answers it.
struct TestServer {
  Metrics metrics;
  std::mutex mu;
  std::vector<std::shared_ptr<Responder>> parked;
  std::atomic<int> gone{0};
  std::vector<std::thread> threads;
  std::unique_ptr<HttpServer> http;
  int port = 0;

  explicit TestServer(ConnectionLimits limits = {}) {
    http = std::make_unique<HttpServer>(
        [this](HttpRequest r, std::shared_ptr<Responder> res) {
          res->on_gone([this] { ++gone; });
          if (r.path == "/echo") return res->send(200, "text/plain", r.method + " " + r.body);
          if (r.path == "/stream") {
            std::lock_guard<std::mutex> lock(mu);
            threads.emplace_back([res] {
              res->start_stream(200, "text/event-stream");
              for (const char* c : {"one ", "two ", "three"}) {
                std::this_thread::sleep_for(10ms);
                res->write(c);
              }
              res->end();
            });
            return;
          }
          if (r.path == "/park") {
            std::lock_guard<std::mutex> lock(mu);
            parked.push_back(res);
            return;
          }
          res->send(404, "text/plain", "no");
        },
        metrics, limits);
    port = http->bind("127.0.0.1", 0);
    http->start();
  }
  ~TestServer() {
    for (auto& t : threads) t.join();
    parked.clear();  // responders do not outlive the server
    http->stop();
  }
  size_t parked_count() {
    std::lock_guard<std::mutex> lock(mu);
    return parked.size();
  }
  bool wait_parked(size_t n) {
    for (int i = 0; i < 300 && parked_count() < n; ++i) std::this_thread::sleep_for(10ms);
    return parked_count() >= n;
  }
};

TEST(HttpServer, KeepAliveServesRequestsInTurn) {
  TestServer s;
  Client c(s.port);
  ASSERT_TRUE(c.connected());
  c.send_all(post("/echo", "first"));
  const std::string a = c.read_response();
  EXPECT_EQ(status_of(a), 200);
  EXPECT_NE(a.find("\r\n\r\nPOST first"), std::string::npos) << a;
  c.send_all(get("/echo?x=1"));
  const std::string b = c.read_response();
  EXPECT_NE(b.find("\r\n\r\nGET "), std::string::npos) << b;
  EXPECT_EQ(s.gone.load(), 0);
}

TEST(HttpServer, StreamsChunksWrittenFromAnotherThread) {
  TestServer s;
  Client c(s.port);
  c.send_all("GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string r = c.read_until_quiet();
  EXPECT_EQ(status_of(r), 200);
  EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos) << r;
  // The chunked body: "4\r\none \r\n4\r\ntwo \r\n5\r\nthree\r\n0\r\n\r\n".
  EXPECT_NE(r.find("4\r\none \r\n4\r\ntwo \r\n5\r\nthree\r\n0\r\n\r\n"), std::string::npos) << r;
}

TEST(HttpServer, RequestsThatDoNotArriveGet408AndIdleOnesAreClosed) {
  ConnectionLimits l;
  l.header_timeout_s = 0.3;
  TestServer s(l);
  Client half(s.port), idle(s.port);
  half.send_all("POST /echo HTTP/1.1\r\nHost: x\r\nContent-");
  const std::string r = half.read_until_quiet();
  EXPECT_EQ(status_of(r), 408) << r;
  EXPECT_NE(r.find("\"error\""), std::string::npos);
  EXPECT_TRUE(idle.closed_by_peer());
  EXPECT_NE(s.metrics.render().find("nextn_http_timeouts_total 2"), std::string::npos) << s.metrics.render();
}

TEST(HttpServer, BodyTimeoutCountsFromTheHeaders) {
  ConnectionLimits l;
  l.body_timeout_s = 0.3;
  TestServer s(l);
  Client c(s.port);
  c.send_all("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc");
  EXPECT_EQ(status_of(c.read_until_quiet()), 408);
}

TEST(HttpServer, OversizedAndMalformedRequestsAreRefused) {
  ConnectionLimits l;
  l.max_body_bytes = 1000;
  l.max_header_bytes = 2048;
  TestServer s(l);
  Client big(s.port), headers(s.port), junk(s.port);
  big.send_all(post("/echo", std::string(1001, 'a')));
  EXPECT_EQ(status_of(big.read_until_quiet()), 413);
  headers.send_all("GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(4000, 'h') + "\r\n\r\n");
  EXPECT_EQ(status_of(headers.read_until_quiet()), 431);
  junk.send_all("NOT AN HTTP REQUEST\r\n\r\n");
  EXPECT_EQ(status_of(junk.read_until_quiet()), 400);
  Client ok(s.port);  // and the server goes on
  ok.send_all(post("/echo", std::string(1000, 'a')));
  EXPECT_EQ(status_of(ok.read_response()), 200);
}

TEST(HttpServer, HalfSentRequestsDoNotHoldUpOthers) {
  TestServer s;
  std::vector<std::unique_ptr<Client>> slow;
  for (int i = 0; i < 64; ++i) {
    slow.push_back(std::make_unique<Client>(s.port));
    slow.back()->send_all("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nhalf");
  }
  for (int i = 0; i < 5; ++i) {
    Client c(s.port);
    c.send_all(get("/echo"));
    EXPECT_EQ(status_of(c.read_response()), 200);
  }
}

TEST(HttpServer, AtTheCapTheOldestIdleConnectionMakesRoom) {
  ConnectionLimits l;
  l.max_connections = 4;
  TestServer s(l);
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(std::make_unique<Client>(s.port));
    std::this_thread::sleep_for(20ms);  // an order of arrival
  }
  Client probe(s.port);
  probe.send_all(get("/echo"));
  EXPECT_EQ(status_of(probe.read_response()), 200);
  EXPECT_TRUE(idle[0]->closed_by_peer());
  EXPECT_FALSE(idle[3]->closed_by_peer(100));
  EXPECT_NE(s.metrics.render().find("nextn_http_connections_evicted_total 1"), std::string::npos);
}

TEST(HttpServer, AtTheCapWithEveryConnectionBusyANewOneGets503) {
  ConnectionLimits l;
  l.max_connections = 2;
  TestServer s(l);
  Client a(s.port), b(s.port);
  a.send_all(get("/park"));
  b.send_all(get("/park"));
  ASSERT_TRUE(s.wait_parked(2));
  Client c(s.port);
  const std::string r = c.read_until_quiet();
  EXPECT_EQ(status_of(r), 503) << r;
  for (auto& res : s.parked) res->send(200, "text/plain", "late");
  EXPECT_EQ(status_of(a.read_response()), 200);
}

TEST(HttpServer, AClientThatGoesAwayIsHeard) {
  TestServer s;
  {
    Client c(s.port);
    c.send_all(get("/park"));
    ASSERT_TRUE(s.wait_parked(1));
  }
  for (int i = 0; i < 300 && s.gone.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(s.gone.load(), 1);
  s.parked[0]->send(200, "text/plain", "nobody");  // after the close: nothing happens
}

TEST(HttpServer, AClientThatDoesNotReadTimesOut) {
  ConnectionLimits l;
  l.write_timeout_s = 0.3;
  TestServer s(l);
  Client c(s.port);
  c.send_all(get("/park"));
  ASSERT_TRUE(s.wait_parked(1));
  auto res = s.parked[0];
  res->start_stream(200, "text/plain");
  const std::string mib(1 << 20, 'x');
  for (int i = 0; i < 64; ++i) res->write(mib);  // far beyond the socket buffers
  for (int i = 0; i < 500 && s.gone.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(s.gone.load(), 1);
}

TEST(HttpServer, TheDrainClosesIdleConnectionsAndFinishesTheOthers) {
  TestServer s;
  Client idle(s.port), busy(s.port);
  busy.send_all(get("/park"));
  ASSERT_TRUE(s.wait_parked(1));
  s.http->stop_accepting();
  EXPECT_TRUE(idle.closed_by_peer());
  s.parked[0]->send(200, "text/plain", "done");
  const std::string r = busy.read_until_quiet();
  EXPECT_EQ(status_of(r), 200);
  EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
  // The server lingers (reading what the client might still send) up to 2 s after its last response.
  for (int i = 0; i < 400 && s.http->open_connections() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(s.http->open_connections(), 0);
  Client late(s.port);
  EXPECT_FALSE(late.connected());
}

}  // namespace
}  // namespace nextn::server
