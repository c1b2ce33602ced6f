// ConnectionGate: bytes relayed exactly both ways (with half-close), the caps (displacing the
// connection that sent least, never a settled one), silent connections closed, and the
// per-address key. The inner side is a small echo server on a Unix socket; every wait is
// for an event (bytes or EOF), with a generous timeout, never a sleep.
#include "server/conn_gate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace muloco {
namespace {

// Echoes every connection's bytes back; closes its side once the client has closed its own.
class EchoServer {
 public:
  EchoServer() {
    char dir[] = "/tmp/gate_test.XXXXXX";
    dir_ = mkdtemp(dir);
    path_ = dir_ + "/echo.sock";
    fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(fd_, 64), 0);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        ++accepted_;
        std::thread([c] {
          char buf[8192];
          for (ssize_t got; (got = read(c, buf, sizeof buf)) > 0;) {
            for (ssize_t off = 0; off < got;) {
              const ssize_t put = send(c, buf + off, static_cast<size_t>(got - off), MSG_NOSIGNAL);
              if (put <= 0) break;
              off += put;
            }
          }
          close(c);
        }).detach();
      }
    });
  }
  ~EchoServer() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }
  int accepted() const { return accepted_.load(); }

 private:
  std::string dir_, path_;
  int fd_ = -1;
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

void SendAll(int fd, const std::string& bytes) {
  for (size_t off = 0; off < bytes.size();) {
    const ssize_t put = send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    ASSERT_GT(put, 0);
    off += static_cast<size_t>(put);
  }
}

// Reads until `want` bytes came, EOF, or 30 s passed without a byte.
std::string ReadUpTo(int fd, size_t want, bool* eof = nullptr) {
  std::string out;
  char buf[65536];
  while (out.size() < want) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 30000) <= 0) break;
    const ssize_t got = read(fd, buf, std::min(sizeof buf, want - out.size()));
    if (got <= 0) {
      if (eof != nullptr) *eof = true;
      break;
    }
    out.append(buf, static_cast<size_t>(got));
  }
  return out;
}

// True once the gate has closed fd (EOF or reset), waiting up to 30 s.
bool ClosedByGate(int fd) {
  bool eof = false;
  ReadUpTo(fd, SIZE_MAX, &eof);
  return eof;
}

std::string Echo(int fd, const std::string& bytes) {
  SendAll(fd, bytes);
  return ReadUpTo(fd, bytes.size());
}

std::unique_ptr<ConnectionGate> StartGate(const EchoServer& echo, uint32_t total, uint32_t per_address,
                                          double silent_s = 30) {
  absl::StatusOr<std::unique_ptr<ConnectionGate>> g =
      ConnectionGate::Start(GateOptions{"127.0.0.1:0", echo.path(), total, per_address, silent_s});
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *std::move(g) : nullptr;
}

TEST(ConnectionGate, RelaysEveryByteBothWaysAndPassesOnHalfClose) {
  EchoServer echo;
  auto gate = StartGate(echo, 16, 16);
  std::mt19937 rng(1);
  std::string big(3 << 20, '\0');  // larger than the gate's buffers: flow control is exercised
  for (char& c : big) c = static_cast<char>(rng());
  const int fd = Connect(gate->port());
  std::thread writer([&] {
    SendAll(fd, big);
    shutdown(fd, SHUT_WR);  // the echo server sees EOF only if the gate passes it on
  });
  bool eof = false;
  const std::string back = ReadUpTo(fd, big.size() + 1, &eof);
  writer.join();
  EXPECT_TRUE(back == big) << back.size() << " of " << big.size() << " bytes came back";
  EXPECT_TRUE(eof);  // the echo server closed after our half-close, and that reached us
  close(fd);
  EXPECT_EQ(gate->Stats().accepted, 1u);
}

TEST(ConnectionGate, OverTheAddressCapTheSilentOldestMakesRoom) {
  EchoServer echo;
  auto gate = StartGate(echo, 100, 3);
  const int spoke = Connect(gate->port());
  ASSERT_EQ(Echo(spoke, "hello"), "hello");
  const int silent_old = Connect(gate->port());
  const int silent_new = Connect(gate->port());
  ASSERT_EQ(Echo(silent_new, "x"), "x");  // now it has spoken too (1 byte < "hello")
  // Fourth from the same address: the one that sent least (silent_old, 0 bytes) goes.
  const int newcomer = Connect(gate->port());
  EXPECT_TRUE(ClosedByGate(silent_old));
  EXPECT_EQ(Echo(newcomer, "hi"), "hi");
  EXPECT_EQ(Echo(spoke, "still"), "still");
  EXPECT_EQ(Echo(silent_new, "y"), "y");
  EXPECT_EQ(gate->Stats().displaced, 1u);
  EXPECT_EQ(gate->Stats().open, 3u);
  for (int fd : {spoke, silent_old, silent_new, newcomer}) close(fd);
}

TEST(ConnectionGate, SettledConnectionsAreNeverDisplaced) {
  EchoServer echo;
  auto gate = StartGate(echo, 2, 2);
  const std::string settle(ConnectionGate::kSettledBytes, 's');
  const int a = Connect(gate->port());
  const int b = Connect(gate->port());
  ASSERT_EQ(Echo(a, settle), settle);
  ASSERT_EQ(Echo(b, settle), settle);
  const int refused = Connect(gate->port());  // the TCP handshake completes; the gate then closes it
  EXPECT_TRUE(ClosedByGate(refused));
  EXPECT_EQ(Echo(a, "a"), "a");
  EXPECT_EQ(Echo(b, "b"), "b");
  const GateStats st = gate->Stats();
  EXPECT_EQ(st.refused_total + st.refused_per_address, 1u);
  EXPECT_EQ(st.displaced, 0u);
  for (int fd : {a, b, refused}) close(fd);
}

TEST(ConnectionGate, AFloodOfSilentConnectionsStaysBoundedAndANewcomerGetsThrough) {
  EchoServer echo;
  auto gate = StartGate(echo, 64, 16);
  std::vector<int> flood;
  for (int i = 0; i < 200; ++i) flood.push_back(Connect(gate->port()));
  const int honest = Connect(gate->port());
  EXPECT_EQ(Echo(honest, "join"), "join");
  const GateStats st = gate->Stats();
  EXPECT_LE(st.open, 16u);                         // the address's cap held
  EXPECT_EQ(st.displaced, 201u - 16u);             // each newcomer took a silent one's place
  EXPECT_EQ(echo.accepted(), 1);                   // silent connections never reached the inner server
  for (int fd : flood) close(fd);
  close(honest);
}

TEST(ConnectionGate, AConnectionSilentTooLongIsClosed) {
  EchoServer echo;
  auto gate = StartGate(echo, 16, 16, /*silent_s=*/0.3);
  const int silent = Connect(gate->port());
  EXPECT_TRUE(ClosedByGate(silent));
  EXPECT_EQ(gate->Stats().silent_closed, 1u);
  EXPECT_EQ(echo.accepted(), 0);  // it never reached the inner server
  close(silent);
}

TEST(ConnectionGate, RefusesBadOptions) {
  EXPECT_FALSE(ConnectionGate::Start(GateOptions{"127.0.0.1:0", "/tmp/x.sock", 0, 1}).ok());
  EXPECT_FALSE(ConnectionGate::Start(GateOptions{"127.0.0.1:0", "/tmp/x.sock", 1, 0}).ok());
  EXPECT_FALSE(ConnectionGate::Start(GateOptions{"no-port", "/tmp/x.sock", 1, 1}).ok());
  EXPECT_FALSE(ConnectionGate::Start(GateOptions{"127.0.0.1:0", std::string(200, 'p'), 1, 1}).ok());
}

sockaddr_storage Parse(const char* text) {
  sockaddr_storage s{};
  if (inet_pton(AF_INET, text, &reinterpret_cast<sockaddr_in*>(&s)->sin_addr) == 1) {
    s.ss_family = AF_INET;
  } else {
    EXPECT_EQ(inet_pton(AF_INET6, text, &reinterpret_cast<sockaddr_in6*>(&s)->sin6_addr), 1) << text;
    s.ss_family = AF_INET6;
  }
  return s;
}

TEST(ConnectionGate, AddressKeyIsTheIpv4AddressOrTheIpv6Slash64) {
  EXPECT_EQ(AddressKey(Parse("203.0.113.7")), "203.0.113.7");
  EXPECT_EQ(AddressKey(Parse("::ffff:203.0.113.7")), "203.0.113.7");
  EXPECT_EQ(AddressKey(Parse("2001:db8:1:2:aaaa:bbbb:cccc:dddd")), "2001:db8:1:2::/64");
  EXPECT_EQ(AddressKey(Parse("2001:db8:1:2::1")), AddressKey(Parse("2001:db8:1:2:ffff::9")));
  EXPECT_NE(AddressKey(Parse("2001:db8:1:2::1")), AddressKey(Parse("2001:db8:1:3::1")));
}

}  // namespace
}  // namespace muloco
