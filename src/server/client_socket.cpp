#include "server/client_socket.h"

#include <cerrno>
#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>

namespace nextn::server {
namespace {

bool endpoint_is(const sockaddr_storage& a, socklen_t len, const std::string& addr, int port) {
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, service, sizeof service,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  return addr == host && port == std::atoi(service);
}

}  // namespace

int find_connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                           int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    sockaddr_storage local{}, remote{};
    socklen_t local_len = sizeof local, remote_len = sizeof remote;
    if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;  // not a socket
    if (getpeername(int(fd), reinterpret_cast<sockaddr*>(&remote), &remote_len) != 0) continue;  // not connected
    if (endpoint_is(local, local_len, local_addr, local_port) && endpoint_is(remote, remote_len, remote_addr, remote_port)) {
      found = int(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool peer_closed(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;  // nothing to read: still waiting
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) return true;
  char byte;
  const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace nextn::server
