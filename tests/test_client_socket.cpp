// server/client_socket.h on a real loopback TCP connection: the accepted
// socket is found by its address pair, and peer_closed tells a waiting
// client (idle or with unread bytes) from one that closed its end.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "server/client_socket.h"

namespace nextn::server {
namespace {

int port_of(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  EXPECT_EQ(rc, 0);
  return ntohs(a.sin_port);
}

TEST(ClientSocket, FindsTheConnectionAndSeesTheClientLeave) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  const int port = port_of(listener, false);
  addr.sin_port = htons(uint16_t(port));
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const int accepted = accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);

  const int client_port = port_of(accepted, true);
  EXPECT_EQ(find_connection_socket("127.0.0.1", port, "127.0.0.1", client_port), accepted);
  EXPECT_EQ(find_connection_socket("127.0.0.1", port, "127.0.0.1", client_port == 1 ? 2 : 1), -1);
  EXPECT_EQ(find_connection_socket("127.0.0.2", port, "127.0.0.1", client_port), -1);

  EXPECT_FALSE(peer_closed(accepted));  // connected, nothing sent
  ASSERT_EQ(send(client, "GET", 3, 0), 3);
  EXPECT_FALSE(peer_closed(accepted));  // unread bytes are not a close, and stay unread
  close(client);
  for (int i = 0; i < 100 && !peer_closed(accepted); ++i) usleep(10000);  // the FIN is on loopback at once
  EXPECT_TRUE(peer_closed(accepted));
  char buf[4];
  EXPECT_EQ(recv(accepted, buf, sizeof buf, 0), 3);  // peek consumed nothing
  close(accepted);
  close(listener);
}

}  // namespace
}  // namespace nextn::server
