#include "server/http_server.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "server/http_error.h"
#include "server/openai_format.h"

namespace nextn::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

namespace {

// Two threads serve every connection: their work per event is parsing
// headers and copying bytes; the API hands anything slower to its own pool.
constexpr int kIoThreads = 2;
// File descriptors beyond the connections: the checkpoint, the listener,
// the engine's and the API's threads' needs.
constexpr rlim_t kSpareFiles = 256;
// A connection closed after a response (an error, or no keep-alive) first
// reads and drops what the client still sends, for at most this long and
// this much: closing with unread input would reset the connection, and the
// client would lose the response (a 413 it is still uploading the body of).
constexpr double kLingerSeconds = 2;
constexpr size_t kLingerBytes = 16 << 20;

std::chrono::steady_clock::duration after(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

http::response<http::string_body> error_response(int status, const std::string& message, bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(status), 11};
  res.set(http::field::server, "nextn");
  res.set(http::field::content_type, "application/json");
  res.keep_alive(keep_alive);
  res.body() = dump_json(error_json(status, message));
  res.prepare_payload();
  return res;
}

// Raises the soft open-file limit so that `connections` sockets fit. When
// the hard limit cannot hold them: an explicit cap is refused by name, the
// default one is lowered to what fits (returned).
int raise_open_file_limit(int connections, bool lower_to_fit) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return connections;
  rlim_t want = rlim_t(connections) + kSpareFiles;
  if (lim.rlim_cur >= want) return connections;
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < want) {
    const rlim_t fits = lim.rlim_max > kSpareFiles ? lim.rlim_max - kSpareFiles : 0;
    if (!lower_to_fit || fits < 1)
      fail("--max-connections {}: the open-file limit is {} (hard), which holds at most {} connections", connections,
           lim.rlim_max, fits);
    connections = int(fits);
    want = lim.rlim_max;
  }
  lim.rlim_cur = want;
  if (setrlimit(RLIMIT_NOFILE, &lim) != 0)
    fail("--max-connections {}: cannot raise the open-file limit to {}", connections, want);
  return connections;
}

}  // namespace

struct HttpServer::Impl {
  Handler handler;
  Metrics& metrics;
  ConnectionLimits limits;
  net::io_context io{kIoThreads};
  net::strand<net::io_context::executor_type> accept_strand{io.get_executor()};
  tcp::acceptor acceptor{accept_strand};
  net::steady_timer accept_retry{accept_strand};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  std::atomic<int> open{0};
  std::atomic<bool> draining{false};

  std::mutex mu;  // the two maps
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions;  // every open connection, by id
  std::map<uint64_t, uint64_t> evictable;  // seq -> id: connections with no request in progress, oldest first
  uint64_t next_id = 1, next_seq = 1;

  Impl(Handler h, Metrics& m, ConnectionLimits l) : handler(std::move(h)), metrics(m), limits(l) {}
  void accept();
  void refuse_at_cap(tcp::socket& socket);
  uint64_t mark_evictable(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu);
    evictable[next_seq] = id;
    return next_seq++;
  }
  void unmark_evictable(uint64_t seq) {
    std::lock_guard<std::mutex> lock(mu);
    evictable.erase(seq);
  }
  void forget(uint64_t id, uint64_t seq) {
    {
      std::lock_guard<std::mutex> lock(mu);
      evictable.erase(seq);
      sessions.erase(id);
    }
    metrics.connections(--open);
  }
  bool evict_oldest();
  std::vector<std::shared_ptr<Session>> live(bool only_evictable);
};

// One connection. Everything but the Responder methods and the two closers
// runs on its strand (the socket's executor); those post to it.
class Session : public Responder, public std::enable_shared_from_this<Session> {
 public:
  Session(HttpServer::Impl& server, tcp::socket socket, uint64_t id)
      : server_(server), socket_(std::move(socket)), timer_(socket_.get_executor()), id_(id) {}

  void start() {
    net::post(socket_.get_executor(), [self = shared_from_this()] { self->read_request(); });
  }
  // At the cap or the drain: closes the connection if it has no request in progress.
  void close_if_idle(bool evicted) {
    net::post(socket_.get_executor(), [self = shared_from_this(), evicted] {
      if (self->closed_ || self->phase_ != Phase::Reading) return;
      if (evicted) self->server_.metrics.connection_evicted();
      self->abandon_read(503, "the server is at its connection cap, or shutting down");
    });
  }
  void close_now() {
    net::post(socket_.get_executor(), [self = shared_from_this()] { self->close(); });
  }

  void send(int status, const std::string& content_type, std::string body) override {
    net::post(socket_.get_executor(), [self = shared_from_this(), status, content_type, body = std::move(body)]() mutable {
      if (!self->can_start()) return;
      auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), 11);
      res->set(http::field::server, "nextn");
      res->set(http::field::content_type, content_type);
      res->keep_alive(self->keep_alive_);
      res->body() = std::move(body);
      res->prepare_payload();
      self->enqueue([self, res](Done done) { http::async_write(self->socket_, *res, [res, done](error_code ec, size_t) { done(ec); }); },
                    /*ends_response=*/true);
    });
  }

  void start_stream(int status, const std::string& content_type) override {
    net::post(socket_.get_executor(), [self = shared_from_this(), status, content_type] {
      if (!self->can_start()) return;
      self->streaming_ = true;
      auto head = std::make_shared<StreamHead>();
      head->res.result(static_cast<http::status>(status));
      head->res.set(http::field::server, "nextn");
      head->res.set(http::field::content_type, content_type);
      head->res.set(http::field::cache_control, "no-cache");
      head->res.keep_alive(self->keep_alive_);
      head->res.chunked(true);
      self->enqueue([self, head](Done done) {
        http::async_write_header(self->socket_, head->serializer, [head, done](error_code ec, size_t) { done(ec); });
      }, false);
    });
  }

  void write(std::string chunk) override {
    if (chunk.empty()) return;  // an empty chunk would end the body
    net::post(socket_.get_executor(), [self = shared_from_this(), chunk = std::move(chunk)]() mutable {
      if (self->closed_ || !self->streaming_ || self->ended_) return;
      auto data = std::make_shared<std::string>(std::move(chunk));
      self->enqueue([self, data](Done done) {
        net::async_write(self->socket_, http::make_chunk(net::buffer(*data)), [data, done](error_code ec, size_t) { done(ec); });
      }, false);
    });
  }

  void end() override {
    net::post(socket_.get_executor(), [self = shared_from_this()] {
      if (self->closed_ || !self->streaming_ || self->ended_) return;
      self->ended_ = true;
      self->enqueue([self](Done done) {
        net::async_write(self->socket_, http::make_chunk_last(), [done](error_code ec, size_t) { done(ec); });
      }, true);
    });
  }

  void on_gone(std::function<void()> callback) override {
    net::post(socket_.get_executor(), [self = shared_from_this(), callback = std::move(callback)]() mutable {
      if (self->gone_) {
        callback();
        return;
      }
      if (!self->closed_ && self->phase_ == Phase::Handling && !self->response_complete_)
        self->on_gone_ = std::move(callback);
    });
  }

 private:
  using Done = std::function<void(error_code)>;
  enum class Phase { Reading, Handling };
  enum class Deadline { Request, Write, Linger };
  struct StreamHead {
    http::response<http::empty_body> res{http::status::ok, 11};
    http::response_serializer<http::empty_body> serializer{res};
  };

  const ConnectionLimits& limits() const { return server_.limits; }

  // --- reading a request -------------------------------------------------
  void read_request() {
    if (closed_) return;
    phase_ = Phase::Reading;
    started_ = streaming_ = ended_ = timed_out_ = false;
    on_gone_ = nullptr;
    seq_ = server_.mark_evictable(id_);
    parser_.emplace();
    parser_->header_limit(uint32_t(limits().max_header_bytes));
    parser_->body_limit(uint64_t(limits().max_body_bytes));
    arm(first_ ? limits().header_timeout_s : std::max(limits().idle_timeout_s, limits().header_timeout_s),
        Deadline::Request);
    http::async_read_header(socket_, buffer_, *parser_,
                            [self = shared_from_this()](error_code ec, size_t) { self->on_headers(ec); });
  }

  void on_headers(error_code ec) {
    if (ec) return read_failed(ec);
    arm(limits().body_timeout_s, Deadline::Request);
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(socket_, net::buffer(kContinue), [self = shared_from_this()](error_code e, size_t) {
        if (e) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) { self->on_request(ec); });
  }

  void read_failed(error_code ec) {
    if (closed_ || timed_out_) return;  // closed, or the deadline answers
    if (ec == http::error::body_limit)
      return abandon_read(413, fmt::format("the request body is over this server's limit of {} bytes", limits().max_body_bytes));
    if (ec == http::error::header_limit)
      return abandon_read(431, fmt::format("the request headers are over {} bytes", limits().max_header_bytes));
    if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message)
      return abandon_read(400, fmt::format("the request is malformed: {}", ec.message()));
    close();  // the client closed, reset, or left a request half-sent
  }

  // Refuses the request being read: the answer, then close.
  void abandon_read(int status, const std::string& message) {
    if (closed_ || phase_ != Phase::Reading) return;
    const bool partial = buffer_.size() > 0 || (parser_ && parser_->got_some());
    server_.unmark_evictable(seq_);
    if (!partial && status != 413 && status != 431 && status != 400) return close();  // idle: nothing to answer
    phase_ = Phase::Handling;
    started_ = true;
    keep_alive_ = false;
    error_code ignored;
    socket_.cancel(ignored);  // the pending read ends (read_failed then sees timed_out_ or closed_)
    timed_out_ = true;
    auto res = std::make_shared<http::response<http::string_body>>(error_response(status, message, false));
    enqueue([self = shared_from_this(), res](Done done) {
      http::async_write(self->socket_, *res, [res, done](error_code e, size_t) { done(e); });
    }, true);
  }

  void on_request(error_code ec) {
    if (ec) return read_failed(ec);
    disarm();
    server_.unmark_evictable(seq_);
    phase_ = Phase::Handling;
    first_ = false;
    http::request<http::string_body> req = parser_->release();
    keep_alive_ = req.keep_alive() && !server_.draining;
    const std::string target(req.target());
    HttpRequest r{std::string(req.method_string()), target.substr(0, target.find('?')), std::move(req.body())};
    watch_peer();
    server_.handler(std::move(r), shared_from_this());
  }

  // While a request is handled nothing is read: a readable socket then means
  // the client closed (or sent a pipelined request, which ends the watch).
  void watch_peer() {
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), gen = ++watch_gen_](error_code ec) {
      if (gen != self->watch_gen_ || self->closed_ || self->phase_ != Phase::Handling) return;
      if (ec == net::error::operation_aborted) return;
      if (ec) return self->close();
      char byte;
      const ssize_t n = ::recv(self->socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return self->close();
      if (n < 0) self->watch_peer();
    });
  }

  // --- writing the response ----------------------------------------------
  bool can_start() {
    if (closed_ || phase_ != Phase::Handling || started_) return false;
    started_ = true;
    keep_alive_ = keep_alive_ && !server_.draining;  // a drain that began while the request was handled
    return true;
  }

  void enqueue(std::function<void(Done)> start_write, bool ends_response) {
    out_.emplace_back(std::move(start_write), ends_response);
    if (!writing_) next_write();
  }

  void next_write() {
    if (closed_ || out_.empty()) return;
    writing_ = true;
    auto [start_write, ends_response] = std::move(out_.front());
    out_.pop_front();
    arm(limits().write_timeout_s, Deadline::Write);
    start_write([self = shared_from_this(), ends = ends_response](error_code ec) { self->wrote(ec, ends); });
  }

  void wrote(error_code ec, bool ends_response) {
    writing_ = false;
    if (closed_) return;
    disarm();
    if (ec) return close();
    if (!ends_response) return next_write();
    response_complete_ = true;
    on_gone_ = nullptr;
    if (!keep_alive_ || server_.draining) return linger();
    ++watch_gen_;  // the peer watch ends
    error_code ignored;
    socket_.cancel(ignored);
    response_complete_ = false;
    read_request();
  }

  // --- deadlines and closing ---------------------------------------------
  void linger() {
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    scratch_ = std::make_unique<char[]>(kScratchBytes);
    arm(kLingerSeconds, Deadline::Linger);
    discard();
  }

  void discard() {
    socket_.async_read_some(net::buffer(scratch_.get(), kScratchBytes), [self = shared_from_this()](error_code ec, size_t n) {
      if (self->closed_) return;
      self->discarded_ += n;
      if (ec || self->discarded_ > kLingerBytes) return self->close();
      self->discard();
    });
  }

  void arm(double seconds, Deadline kind) {
    timer_.expires_after(after(seconds));
    timer_.async_wait([self = shared_from_this(), gen = ++timer_gen_, kind](error_code ec) {
      if (ec || gen != self->timer_gen_ || self->closed_) return;
      if (kind == Deadline::Linger) return self->close();
      self->server_.metrics.connection_timed_out();
      if (kind == Deadline::Write) return self->close();  // a client that does not read
      self->abandon_read(408, "the request did not arrive in time");
    });
  }

  void disarm() {
    ++timer_gen_;
    timer_.cancel();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    disarm();
    error_code ignored;
    socket_.close(ignored);
    out_.clear();
    server_.forget(id_, seq_);
    // The callback may hold what holds this session (the API's answer): drop it either way.
    const std::function<void()> callback = std::exchange(on_gone_, nullptr);
    if (phase_ == Phase::Handling && !response_complete_) {
      gone_ = true;
      if (callback) callback();
    }
  }

  HttpServer::Impl& server_;
  tcp::socket socket_;
  net::steady_timer timer_;
  const uint64_t id_;
  uint64_t seq_ = 0;  // the evictable entry while Reading
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Phase phase_ = Phase::Reading;
  bool first_ = true;       // no request served yet: header_timeout, not idle_timeout
  bool keep_alive_ = true;  // of the request being handled
  bool started_ = false, streaming_ = false, ended_ = false, response_complete_ = false;
  bool timed_out_ = false;  // the read was abandoned: its cancelled handler does nothing
  bool writing_ = false, closed_ = false, gone_ = false;
  uint64_t timer_gen_ = 0, watch_gen_ = 0;
  std::deque<std::pair<std::function<void(Done)>, bool>> out_;
  std::function<void()> on_gone_;
  static constexpr size_t kScratchBytes = 16 << 10;
  std::unique_ptr<char[]> scratch_;  // lingering: what the client still sends lands here
  size_t discarded_ = 0;
};

void HttpServer::Impl::accept() {
  acceptor.async_accept(net::make_strand(io), [this](error_code ec, tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (ec) {  // out of file descriptors, or the peer gave up: back off, try again
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](error_code e) {
        if (!e) accept();
      });
      return;
    }
    if (open.load() >= limits.max_connections && !evict_oldest()) {
      metrics.connection_refused();
      refuse_at_cap(socket);
    } else {
      uint64_t id;
      {
        std::lock_guard<std::mutex> lock(mu);
        id = next_id++;
      }
      auto session = std::make_shared<Session>(*this, std::move(socket), id);
      {
        std::lock_guard<std::mutex> lock(mu);
        sessions[id] = session;
      }
      metrics.connections(++open);
      session->start();
    }
    accept();
  });
}

void HttpServer::Impl::refuse_at_cap(tcp::socket& socket) {
  error_code ec;
  socket.non_blocking(true, ec);
  auto res = error_response(503, "the server is at its connection cap and every connection has a request in progress",
                            false);
  http::write(socket, res, ec);  // small enough for the socket buffer; a failure changes nothing
  socket.close(ec);
}

bool HttpServer::Impl::evict_oldest() {
  std::shared_ptr<Session> victim;
  {
    std::lock_guard<std::mutex> lock(mu);
    while (!evictable.empty() && !victim) {
      const uint64_t id = evictable.begin()->second;
      evictable.erase(evictable.begin());
      if (auto it = sessions.find(id); it != sessions.end()) victim = it->second.lock();
    }
  }
  if (!victim) return false;
  victim->close_if_idle(/*evicted=*/true);
  return true;
}

std::vector<std::shared_ptr<Session>> HttpServer::Impl::live(bool only_evictable) {
  std::vector<std::shared_ptr<Session>> out;
  std::lock_guard<std::mutex> lock(mu);
  if (only_evictable) {
    for (const auto& [seq, id] : evictable)
      if (auto it = sessions.find(id); it != sessions.end())
        if (auto s = it->second.lock()) out.push_back(std::move(s));
  } else {
    for (const auto& [id, weak] : sessions)
      if (auto s = weak.lock()) out.push_back(std::move(s));
  }
  return out;
}

HttpServer::HttpServer(Handler handler, Metrics& metrics, ConnectionLimits limits)
    : impl_(std::make_shared<Impl>(std::move(handler), metrics, limits)) {
  if (limits.max_connections < 1) fail("--max-connections {} must be at least 1", limits.max_connections);
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind(const std::string& host, int port) {
  Impl& s = *impl_;
  s.limits.max_connections = raise_open_file_limit(s.limits.max_connections, s.limits.lower_to_fit_file_limit);
  error_code ec;
  tcp::resolver resolver(s.io);
  const auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) fail("--host {}: cannot resolve it ({})", host, ec.message());
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) fail("--host {} --port {}: cannot listen ({})", host, port, ec.message());
  return s.acceptor.local_endpoint().port();
}

void HttpServer::start() {
  Impl& s = *impl_;
  s.work.emplace(net::make_work_guard(s.io));
  net::post(s.accept_strand, [&s] { s.accept(); });
  for (int i = 0; i < kIoThreads; ++i) s.threads.emplace_back([&s] { s.io.run(); });
}

void HttpServer::stop_accepting() {
  Impl& s = *impl_;
  if (s.draining.exchange(true)) return;
  net::post(s.accept_strand, [&s] {
    error_code ignored;
    s.acceptor.close(ignored);
    s.accept_retry.cancel();
  });
  for (auto& session : s.live(/*only_evictable=*/true)) session->close_if_idle(/*evicted=*/false);
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (s.threads.empty()) return;
  stop_accepting();
  for (auto& session : s.live(/*only_evictable=*/false)) session->close_now();
  s.work.reset();
  // Closed sockets finish their handlers at once; give them a moment, then stop.
  for (int i = 0; i < 100 && !s.io.stopped(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  s.io.stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
}

int HttpServer::open_connections() const { return impl_->open.load(); }

int HttpServer::max_connections() const { return impl_->limits.max_connections; }

}  // namespace nextn::server
