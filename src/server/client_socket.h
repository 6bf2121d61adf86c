// Whether the client of a request still waits for its answer, for handlers
// that write nothing until the end (non-streaming completions). cpp-httplib
// 0.11's Request does not carry its socket, so the handler finds it among
// the process's open sockets by the connection's address pair (local and
// remote address and port, which name one TCP connection), and polls it.
#pragma once
#include <string>

namespace nextn::server {

// The socket whose local and remote endpoints are these (numeric addresses
// as getnameinfo writes them); -1 when none is open.
int find_connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                           int remote_port);

// True when the peer has closed its end or the connection failed: the
// socket reads end of stream (or an error) without consuming any bytes. A
// client that half-closes after its request counts as gone, as in most
// HTTP servers.
bool peer_closed(int fd);

}  // namespace nextn::server
