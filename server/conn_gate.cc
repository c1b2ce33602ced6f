// ConnectionGate (see conn_gate.h): accept, admit or displace, relay with bounded buffers.
#include "server/conn_gate.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"

namespace muloco {
namespace {

constexpr size_t kMaxBuffered = 256 << 10;  // per direction; past it the source is not read
constexpr size_t kReadChunk = 64 << 10;
constexpr uint64_t kListenTag = 0, kWakeTag = 1;  // connection tags are id * 2 + side, id >= 1

epoll_event Event(uint32_t events, uint64_t tag) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag;
  return ev;
}

double NowS() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Bytes read from one side, waiting to be written to the other.
struct Pipe {
  std::string buf;
  size_t off = 0;
  bool eof = false;   // the source closed its sending side
  bool shut = false;  // and that was passed on (shutdown of the destination's sending side)
  size_t pending() const { return buf.size() - off; }
};

struct Conn {
  uint64_t id = 0;
  int fd[2] = {-1, -1};  // [0] the client, [1] gRPC (opened on the client's first byte)
  uint32_t mask[2] = {0, 0};  // epoll interest, once registered
  bool registered[2] = {false, false};
  std::string key;
  double opened = 0;
  uint64_t client_bytes = 0;
  Pipe pipe[2];  // [0] client -> gRPC, [1] gRPC -> client: pipe[s] is read from fd[s]
};

absl::StatusOr<int> BindListener(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return absl::InvalidArgumentError(absl::StrCat("--listen ", listen, ": want HOST:PORT"));
  std::string host = listen.substr(0, colon);
  const std::string port = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--listen ", listen, ": ", gai_strerror(rc)));
  }
  std::string last_error = "no address";
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
      last_error = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", listen, ": ", last_error));
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return 0;
  return ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port
                                       : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
}

}  // namespace

std::string AddressKey(const sockaddr_storage& addr) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, text, sizeof text);
    return text;
  }
  if (addr.ss_family != AF_INET6) return "other";
  in6_addr a = reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr;
  if (IN6_IS_ADDR_V4MAPPED(&a)) {
    inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof text);
    return text;
  }
  std::memset(&a.s6_addr[8], 0, 8);  // the /64 prefix: one site, however many addresses it holds
  inet_ntop(AF_INET6, &a, text, sizeof text);
  return absl::StrCat(text, "/64");
}

uint64_t RaiseDescriptorLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
    getrlimit(RLIMIT_NOFILE, &r);
  }
  return r.rlim_cur == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(r.rlim_cur);
}

struct ConnectionGate::Relay {
  GateOptions o;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  std::atomic<bool> stop{false};
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  std::unordered_map<std::string, uint32_t> per_key;
  uint64_t next_id = 1;
  double listen_paused_until = 0, last_sweep = 0;
  mutable absl::Mutex stats_mu;
  GateStats stats ABSL_GUARDED_BY(stats_mu);

  ~Relay() {
    for (auto& [id, c] : conns) {
      for (int fd : c->fd) if (fd >= 0) close(fd);
    }
    for (int fd : {listen_fd, epoll_fd, wake_fd}) if (fd >= 0) close(fd);
  }

  template <typename F>
  void Count(F f) {
    absl::MutexLock lock(&stats_mu);
    f(stats);
    stats.open = conns.size();
  }

  void Run() {
    std::vector<epoll_event> events(256);
    while (!stop.load()) {
      const int n = epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), 250);
      for (int i = 0; i < n; ++i) {
        const uint64_t tag = events[i].data.u64;
        if (tag == kListenTag) {
          AcceptAll();
        } else if (tag != kWakeTag) {
          auto it = conns.find(tag >> 1);
          if (it != conns.end()) Service(it->second.get(), static_cast<int>(tag & 1), events[i].events);
        }
      }
      Sweep(NowS());
    }
  }

  void AcceptAll() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors (something besides the gate holds them): stop accepting for a
          // moment instead of spinning on the waiting connection.
          epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
          listen_paused_until = NowS() + 0.1;
        }
        return;
      }
      std::string key = AddressKey(addr);
      if (!Admit(key)) {
        close(fd);
        continue;
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<Conn>();
      c->id = next_id++;
      c->fd[0] = fd;
      c->key = std::move(key);
      c->opened = NowS();
      ++per_key[c->key];
      Conn* raw = c.get();
      conns.emplace(raw->id, std::move(c));
      Count([](GateStats& s) { ++s.accepted; });
      Watch(raw);
    }
  }

  // Makes room for a connection from `key` if a cap is full; false: refuse it.
  bool Admit(const std::string& key) {
    if (conns.size() >= o.max_connections && !Displace(nullptr)) {
      Count([](GateStats& s) { ++s.refused_total; });
      return false;
    }
    auto it = per_key.find(key);
    if (it != per_key.end() && it->second >= o.max_connections_per_address && !Displace(&key)) {
      Count([](GateStats& s) { ++s.refused_per_address; });
      return false;
    }
    return true;
  }

  // Closes the unsettled connection (of `key`, or of any address) whose client sent the
  // fewest bytes, the oldest among equals.
  bool Displace(const std::string* key) {
    Conn* victim = nullptr;
    for (auto& [id, c] : conns) {
      if (c->client_bytes >= kSettledBytes || (key != nullptr && c->key != *key)) continue;
      if (victim == nullptr || c->client_bytes < victim->client_bytes ||
          (c->client_bytes == victim->client_bytes && c->opened < victim->opened)) {
        victim = c.get();
      }
    }
    if (victim == nullptr) return false;
    Count([](GateStats& s) { ++s.displaced; });  // before the close: whoever sees it closed sees it counted
    Close(victim);
    return true;
  }

  void Sweep(double now) {
    if (listen_paused_until > 0 && now >= listen_paused_until) {
      epoll_event ev = Event(EPOLLIN, kListenTag);
      epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
      listen_paused_until = 0;
    }
    if (now - last_sweep < 0.5) return;
    last_sweep = now;
    std::vector<Conn*> silent;
    for (auto& [id, c] : conns) {
      if (c->client_bytes == 0 && now - c->opened > o.silent_close_s) silent.push_back(c.get());
    }
    if (!silent.empty()) Count([&](GateStats& s) { s.silent_closed += silent.size(); });  // before the closes
    for (Conn* c : silent) Close(c);
  }

  void Close(Conn* c) {
    for (int fd : c->fd) {
      if (fd < 0) continue;
      epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
      close(fd);
    }
    auto k = per_key.find(c->key);
    if (k != per_key.end() && --k->second == 0) per_key.erase(k);
    conns.erase(c->id);  // destroys c
    Count([](GateStats&) {});
  }

  bool ConnectInner(Conn* c) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, o.inner_socket.c_str(), sizeof a.sun_path - 1);
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
      close(fd);
      return false;
    }
    c->fd[1] = fd;
    return true;
  }

  // Reads side s into pipe[s] (up to kMaxBuffered). False: the connection failed.
  bool Read(Conn* c, int s) {
    Pipe& p = c->pipe[s];
    while (!p.eof && p.pending() < kMaxBuffered) {
      if (p.off > 0 && p.off == p.buf.size()) p.buf.clear(), p.off = 0;
      const size_t old = p.buf.size();
      p.buf.resize(old + kReadChunk);
      const ssize_t got = read(c->fd[s], p.buf.data() + old, kReadChunk);
      p.buf.resize(old + (got > 0 ? static_cast<size_t>(got) : 0));
      if (got > 0) {
        if (s == 0) c->client_bytes += static_cast<uint64_t>(got);
      } else if (got == 0) {
        p.eof = true;
      } else {
        return errno == EAGAIN || errno == EWOULDBLOCK;
      }
    }
    return true;
  }

  // Writes pipe[s] to the other side. False: the connection failed.
  bool Write(Conn* c, int s) {
    Pipe& p = c->pipe[s];
    const int to = c->fd[1 - s];
    while (p.pending() > 0 && to >= 0) {
      const ssize_t put = send(to, p.buf.data() + p.off, p.pending(), MSG_NOSIGNAL);
      if (put < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
      p.off += static_cast<size_t>(put);
    }
    if (p.pending() == 0) p.buf.clear(), p.off = 0;
    if (p.eof && p.pending() == 0 && !p.shut && to >= 0) {
      shutdown(to, SHUT_WR);
      p.shut = true;
    }
    return true;
  }

  void Service(Conn* c, int side, uint32_t events) {
    bool ok = (events & EPOLLERR) == 0;
    if (ok && (events & (EPOLLIN | EPOLLHUP))) ok = Read(c, side);
    if (ok && c->fd[1] < 0 && c->pipe[0].pending() > 0) ok = ConnectInner(c);
    if (ok) ok = Write(c, 0) && Write(c, 1);
    // A side that hung up can take nothing more: once what it sent is passed on, close.
    const bool hung_up = (events & EPOLLHUP) != 0 && c->pipe[side].eof && c->pipe[side].pending() == 0;
    const bool done = c->pipe[0].shut && c->pipe[1].shut;
    const bool client_left_before_speaking = c->fd[1] < 0 && c->pipe[0].eof;
    if (!ok || done || client_left_before_speaking || hung_up) {
      Close(c);
      return;
    }
    Watch(c);
  }

  // Sets each side's epoll interest from what its pipes can take and hold.
  void Watch(Conn* c) {
    for (int s = 0; s < 2; ++s) {
      if (c->fd[s] < 0) continue;
      uint32_t want = 0;
      if (!c->pipe[s].eof && c->pipe[s].pending() < kMaxBuffered) want |= EPOLLIN;
      if (c->pipe[1 - s].pending() > 0) want |= EPOLLOUT;
      if (c->registered[s] && want == c->mask[s]) continue;
      epoll_event ev = Event(want, c->id * 2 + static_cast<uint64_t>(s));
      epoll_ctl(epoll_fd, c->registered[s] ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd[s], &ev);
      c->registered[s] = true;
      c->mask[s] = want;
    }
  }
};

absl::StatusOr<std::unique_ptr<ConnectionGate>> ConnectionGate::Start(const GateOptions& options) {
  if (options.max_connections < 1 || options.max_connections_per_address < 1 || !(options.silent_close_s > 0)) {
    return absl::InvalidArgumentError("need max_connections >= 1, max_connections_per_address >= 1, silent_close_s > 0");
  }
  if (options.inner_socket.empty() || options.inner_socket.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("inner socket path too long: ", options.inner_socket));
  }
  auto relay = std::make_unique<Relay>();
  relay->o = options;
  absl::StatusOr<int> fd = BindListener(options.listen);
  if (!fd.ok()) return fd.status();
  relay->listen_fd = *fd;
  relay->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  relay->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (relay->epoll_fd < 0 || relay->wake_fd < 0) return absl::InternalError(absl::StrCat("epoll: ", std::strerror(errno)));
  epoll_event listen_ev = Event(EPOLLIN, kListenTag);
  epoll_event wake_ev = Event(EPOLLIN, kWakeTag);
  epoll_ctl(relay->epoll_fd, EPOLL_CTL_ADD, relay->listen_fd, &listen_ev);
  epoll_ctl(relay->epoll_fd, EPOLL_CTL_ADD, relay->wake_fd, &wake_ev);
  const int port = BoundPort(relay->listen_fd);
  return std::unique_ptr<ConnectionGate>(new ConnectionGate(std::move(relay), port));
}

ConnectionGate::ConnectionGate(std::unique_ptr<Relay> relay, int port)
    : relay_(std::move(relay)), port_(port), thread_([r = relay_.get()] { r->Run(); }) {}

ConnectionGate::~ConnectionGate() {
  relay_->stop = true;
  const uint64_t one = 1;
  if (write(relay_->wake_fd, &one, sizeof one) < 0) {
    // The relay wakes within its 250 ms poll anyway.
  }
  thread_.join();
}

GateStats ConnectionGate::Stats() const {
  absl::MutexLock lock(&relay_->stats_mu);
  return relay_->stats;
}

}  // namespace muloco
