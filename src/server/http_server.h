// The HTTP/1.1 front end: an event-driven server on Boost.Beast / Asio (a
// few I/O threads serve every connection; none is held by a slow or idle
// client). It owns connections and their limits, not the API: each request
// that arrives whole goes to a Handler with a Responder that answers it from
// any thread, at once or later, whole or as a chunked stream.
// docs/server.md ("Connections") gives the policy and why Beast.
//
// Limits, per connection:
//   - a request's headers within header_timeout_s of the connection's start
//     (idle_timeout_s after a previous response), its body within
//     body_timeout_s after its headers; otherwise 408 and close;
//   - headers over max_header_bytes: 431; a body over max_body_bytes: 413;
//   - a write a client does not take within write_timeout_s: close (the
//     handler hears it through on_gone, as for a client that went away).
// And in all: at most max_connections open. At the cap a new connection
// closes the oldest one that has no request in progress (idle keep-alive or
// still sending), so a health probe is always answered; when every open
// connection has a request in progress, the new one gets a 503 and is closed.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "server/metrics.h"

namespace nextn::server {

struct ConnectionLimits {
  int max_connections = 2048;
  // The cap was not asked for: where the open-file limit cannot hold it,
  // bind() lowers it to what fits instead of refusing.
  bool lower_to_fit_file_limit = false;
  double header_timeout_s = 10;
  double body_timeout_s = 30;
  double idle_timeout_s = 15;
  double write_timeout_s = 30;
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 1 << 20;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without its query
  std::string body;
};

// Answers one request. Every method may be called from any thread; calls
// after the connection closed do nothing. A response is either send(), or
// start_stream(), write()s and end().
class Responder {
 public:
  virtual ~Responder() = default;
  virtual void send(int status, const std::string& content_type, std::string body) = 0;
  virtual void start_stream(int status, const std::string& content_type) = 0;
  virtual void write(std::string chunk) = 0;
  virtual void end() = 0;
  // Runs once (on an I/O thread) if the connection closes before the
  // response ended: the client went away, or a write timed out. Runs at once
  // if that has already happened.
  virtual void on_gone(std::function<void()> callback) = 0;
};

// Called on an I/O thread: must not block (hand slow work to another thread).
using Handler = std::function<void(HttpRequest request, std::shared_ptr<Responder> responder)>;

class Session;  // one connection (http_server.cpp)

class HttpServer {
 public:
  HttpServer(Handler handler, Metrics& metrics, ConnectionLimits limits);
  ~HttpServer();  // stop()
  // Binds and listens (throws Error naming host and port when it cannot);
  // returns the port (port 0: any free one).
  int bind(const std::string& host, int port);
  // Starts the I/O threads: connections are accepted and served from now on.
  void start();
  // The drain: the listening socket closes, connections without a request
  // in progress close, the others close after their response.
  void stop_accepting();
  // Closes every connection and joins the I/O threads.
  void stop();
  int open_connections() const;
  int max_connections() const;  // after bind(): the cap in force

 private:
  friend class Session;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace nextn::server
