// bench/scale: where one aggregation server stops keeping up, as workers and models grow.
//
// Part 1 (in-process): the real RoundEngine and codecs, driven by N simulated workers through
// LocalTransport (inprocess/local_transport.h), each pushing a real encoded payload of a Gaussian
// pseudo-gradient (no training), from --push_threads threads as gRPC handlers would. Per
// cell: wall time per round (first push to the round's update), the share of it in the
// round's close (EngineStats::last_close_seconds: screening and summing what is still held,
// outer step, downlink encode; the rest is the pushes' validation, norms and, for the pushes
// summed on arrival, their sums), the engine's peak memory, and bytes per round. Part 2
// (gRPC): the real server (RunServer) on loopback with N client threads (the worker's
// ServerClient) at one model size, to see what the service adds. Prints one table per part; --csv writes every row.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "codec/codec.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/model_layout.h"
#include "common/run_config.h"
#include "common/tls.h"
#include "server/round_engine.h"
#include "server/run_server.h"
#include "worker/client.h"
#include "inprocess/local_transport.h"

ABSL_FLAG(std::string, sizes, "1e6,1e7,1e8", "Model sizes (parameters, approximate: GPT shapes are chosen near them)");
ABSL_FLAG(std::string, workers, "1,4,16,64,256", "Worker counts (part 1)");
ABSL_FLAG(std::string, codecs, "2bit,dense", "Payload codecs: 2bit (the muloco-2bit preset's codecs, both ways) and/or dense (fp32)");
ABSL_FLAG(int, rounds, 2, "Timed rounds per cell, after one untimed round");
ABSL_FLAG(double, max_work, 3.3e9, "Skip part-1 cells whose workers x parameters exceed this (time on a small machine)");
ABSL_FLAG(double, max_payload_gib, 3.5, "Skip cells whose payloads of one round exceed this (the engine may hold up to two thirds of them in a cold first round)");
ABSL_FLAG(int, push_threads, 0, "Threads pushing in part 1, like gRPC handlers (0: one per core)");
ABSL_FLAG(double, grpc_size, 1e7, "Model size of part 2 (0: skip part 2)");
ABSL_FLAG(std::string, grpc_workers, "1,4,16", "Worker counts of part 2 (client threads over loopback gRPC)");
ABSL_FLAG(std::string, csv, "", "Write every row here");

namespace muloco {
namespace {

using Clock_ = std::chrono::steady_clock;
double Since(Clock_::time_point t) { return std::chrono::duration<double>(Clock_::now() - t).count(); }

std::vector<double> Numbers(const std::string& list) {
  std::vector<double> out;
  for (absl::string_view s : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    double v;
    if (!absl::SimpleAtod(s, &v) || !(v > 0)) {
      std::fprintf(stderr, "scale: bad number '%s'\n", std::string(s).c_str());
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

// A GPT near `target` parameters: d_model a power of two, layers to fill.
v1::RunConfig ConfigFor(double target, const std::string& codec) {
  v1::RunConfig c = *PresetConfig(codec == "2bit" ? "muloco-2bit" : "muloco");
  v1::ModelSpec* m = c.mutable_model();
  int d = 64;
  while (d < 2048 && 12.0 * (2 * d) * (2 * d) <= target) d *= 2;
  const int layers = std::max(1, static_cast<int>(std::lround(target / (12.0 * d * d))));
  m->set_d_model(d);
  m->set_n_layer(layers);
  m->set_n_head(std::max(1, d / 64));
  m->set_context(64);
  return c;
}

// Gaussian values (σ = 1e-3, a pseudo-gradient's scale), xorshift + Box–Muller: fast enough for 1e8.
std::vector<float> Gaussian(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
  auto next = [&] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return (static_cast<double>(s >> 11) + 0.5) / 9007199254740992.0;
  };
  for (size_t i = 0; i + 1 < n; i += 2) {
    const double r = 1e-3 * std::sqrt(-2 * std::log(next())), t = 6.283185307179586 * next();
    v[i] = static_cast<float>(r * std::cos(t));
    v[i + 1] = static_cast<float>(r * std::sin(t));
  }
  if (n % 2) v[n - 1] = 0;
  return v;
}

// Distinct real payloads (workers reuse them in turn: decoding costs the same).
std::vector<std::string> Payloads(const std::vector<Segment>& plan, size_t n, int count) {
  std::vector<std::string> out;
  std::vector<float> ef(n);
  for (int i = 0; i < count; ++i) {
    std::vector<float> delta = Gaussian(n, i + 1);
    std::fill(ef.begin(), ef.end(), 0.0f);
    out.push_back(Compress(plan, delta.data(), 1.0f, ef.data()));
  }
  return out;
}

double RssMiB(const char* field) {  // VmRSS or VmHWM of this process
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field, 0) == 0) return std::atof(line.c_str() + std::string(field).size() + 1) / 1024.0;
  }
  return 0;
}
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

struct Row {
  std::string part, codec;
  size_t params = 0, workers = 0;
  double round_s = 0, close_s = 0, mem_mib = 0;
  uint64_t up_bytes = 0, down_bytes = 0;  // per round, all workers
};

void PrintHeader(const char* title) {
  std::printf("\n%s\n%-6s %11s %8s %10s %10s %10s %12s %12s %14s\n", title, "codec", "params", "workers", "round s",
              "close s", "mem MiB", "up MB/round", "down MB/rnd", "ns/(worker*p)");
}
void Print(const Row& r) {
  std::printf("%-6s %11zu %8zu %10.3f %10.3f %10.0f %12.1f %12.1f %14.3f\n", r.codec.c_str(), r.params, r.workers,
              r.round_s, r.close_s, r.mem_mib, r.up_bytes / 1e6, r.down_bytes / 1e6,
              1e9 * r.round_s / (static_cast<double>(r.workers) * r.params));
  std::fflush(stdout);
}

// Part 1: one cell.
Row InProcess(const v1::RunConfig& config, const std::string& codec, size_t workers, int rounds, int threads,
              const std::vector<std::string>& payloads) {
  const ParamLayout layout = BuiltinLayout(config.model());
  const size_t n = TotalParams(layout);
  ServerOptions so;
  so.round_timeout_s = 1e6;
  so.heartbeat_timeout_s = 1e6;
  SystemClock clock;
  Row row{"engine", codec, n, workers};
  const double rss0 = RssMiB("VmRSS:");
  ResetPeakRss();
  {
    v1::RunConfig c = config;
    c.set_total_rounds(rounds + 1);
    EngineOptions eo = EngineOptionsFor(so, c, layout);
    eo.max_round_bytes = uint64_t{16} << 30;
    RoundEngine engine(eo, std::vector<float>(n, 0.0f), &clock);
    std::vector<std::unique_ptr<LocalTransport>> t;
    std::vector<uint64_t> ids;
    for (size_t w = 0; w < workers; ++w) {
      t.push_back(std::make_unique<LocalTransport>(&engine, c));
      ids.push_back(t.back()->Join("sim" + std::to_string(w), "")->worker_id());
    }
    double total_s = 0, close_s = 0;
    for (int r = 0; r <= rounds; ++r) {
      std::atomic<size_t> next{0};
      const auto start = Clock_::now();
      std::vector<std::thread> pool;
      for (int k = 0; k < threads; ++k) {
        pool.emplace_back([&, k] {
          for (size_t w; (w = next++) < workers;) {
            absl::Status s = t[w]->Push(ids[w], r, payloads[w % payloads.size()], {});
            if (!s.ok()) {
              std::fprintf(stderr, "scale: push failed: %s\n", s.ToString().c_str());
              std::exit(1);
            }
          }
        });
      }
      for (std::thread& th : pool) th.join();
      absl::StatusOr<RoundResult> u = t[0]->AwaitRound(ids[0], r);
      const double took = Since(start);
      if (!u.ok()) {
        std::fprintf(stderr, "scale: round %d: %s\n", r, u.status().ToString().c_str());
        std::exit(1);
      }
      if (r == 0) continue;  // untimed
      total_s += took;
      close_s += engine.Stats().last_close_seconds;
      row.down_bytes = u->payload.size() * workers;
    }
    row.round_s = total_s / rounds;
    row.close_s = close_s / rounds;
    row.up_bytes = 0;
    for (size_t w = 0; w < workers; ++w) row.up_bytes += payloads[w % payloads.size()].size();
  }
  row.mem_mib = RssMiB("VmHWM:") - rss0;
  return row;
}

// A barrier for the part-2 client threads (C++17 has none).
class Barrier {
 public:
  explicit Barrier(size_t n) : n_(n) {}
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return gen_ != gen; });
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const size_t n_;
  size_t count_ = 0;
  uint64_t gen_ = 0;
};

// The server of part 2: loopback, plaintext, open join, a round closes on every worker's push.
ServerOptions ScaleServerOptions(const v1::RunConfig& config, size_t workers, int rounds) {
  ServerOptions so;
  so.listen = "127.0.0.1:0";
  so.port_file = "/tmp/muloco-scale-" + std::to_string(getpid()) + ".port";
  so.config = config;
  so.config.set_total_rounds(rounds + 1);
  so.config.set_eval_every(0);
  so.min_quorum = workers;
  so.round_timeout_s = 1e6;
  so.linger_s = 5;
  so.robust = Robust::kClip;
  so.tls.insecure = true;
  so.auth.open_join = true;
  so.auth.max_joins_per_token_per_minute = 1024;
  so.checkpoint_every = 0;
  return so;
}

std::string WaitForPort(const std::string& port_file) {
  for (int i = 0; i < 600; ++i) {
    absl::StatusOr<std::string> p = ReadFile(port_file);
    if (p.ok() && !absl::StripAsciiWhitespace(*p).empty()) return std::string(absl::StripAsciiWhitespace(*p));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return "";
}

using Spans = std::vector<std::vector<std::pair<Clock_::time_point, Clock_::time_point>>>;

// Mean over the timed rounds (1..rounds) of the first push's start to the last reply's end.
double MeanRoundSeconds(const Spans& spans, int rounds) {
  double total = 0;
  for (int r = 1; r <= rounds; ++r) {
    auto first = spans[0][r].first, last = spans[0][r].second;
    for (size_t w = 1; w < spans.size(); ++w) {
      first = std::min(first, spans[w][r].first);
      last = std::max(last, spans[w][r].second);
    }
    total += std::chrono::duration<double>(last - first).count();
  }
  return total / rounds;
}

// Part 2: the gRPC server on loopback with `workers` client threads.
Row OverGrpc(const v1::RunConfig& config, const std::string& codec, size_t workers, int rounds,
             const std::vector<std::string>& payloads) {
  const size_t n = TotalParams(BuiltinLayout(config.model()));
  const ServerOptions so = ScaleServerOptions(config, workers, rounds);
  std::remove(so.port_file.c_str());
  std::atomic<bool> stop{false}, reload{false};
  const double rss0 = RssMiB("VmRSS:");
  ResetPeakRss();
  std::thread server([&] { RunServer(so, &stop, &reload); });
  const std::string port = WaitForPort(so.port_file);
  Row row{"grpc", codec, n, workers};
  Spans spans(workers);
  std::atomic<int> failures{0};
  Barrier barrier(workers);
  std::vector<std::thread> clients;
  ClientTls tls;
  tls.insecure = true;
  for (size_t w = 0; w < workers; ++w) {
    clients.emplace_back([&, w] {
      ServerClient c("127.0.0.1:" + port, *MakeChannelCredentials(tls), ClientOptions{});
      absl::StatusOr<v1::JoinResponse> j = c.Join("sim" + std::to_string(w), "");
      absl::StatusOr<FetchedModel> m = j.ok() ? c.FetchModel(j->worker_id()) : j.status();
      bool ok = m.ok();
      for (int r = 0; r <= rounds; ++r) {
        barrier.Wait();
        const auto t0 = Clock_::now();
        absl::Status pushed = ok ? c.Push(j->worker_id(), r, payloads[w % payloads.size()], {})
                                 : absl::AbortedError("no session");
        absl::StatusOr<RoundResult> u = pushed.ok() ? c.AwaitRound(j->worker_id(), r) : pushed;
        ok = ok && u.ok();
        if (!u.ok()) {
          if (failures++ == 0) std::fprintf(stderr, "scale: client %zu round %d: %s\n", w, r, u.status().ToString().c_str());
        } else if (w == 0) {
          row.down_bytes = u->payload.size() * workers;
        }
        spans[w].push_back({t0, Clock_::now()});
      }
      if (ok) c.Leave(j->worker_id()).IgnoreError();
    });
  }
  for (std::thread& t : clients) t.join();
  stop = true;
  server.join();
  row.mem_mib = RssMiB("VmHWM:") - rss0;
  std::remove(so.port_file.c_str());
  if (failures > 0) {
    row.round_s = NAN;
    return row;
  }
  row.round_s = MeanRoundSeconds(spans, rounds);
  row.close_s = NAN;
  for (size_t w = 0; w < workers; ++w) row.up_bytes += payloads[w % payloads.size()].size();
  return row;
}

// Part 1 over every codec, size and worker count (within --max_work, --max_payload_gib).
void Part1(const std::vector<std::string>& codecs, int rounds, int threads, std::vector<Row>* rows) {
  PrintHeader("part 1: RoundEngine + codecs, N simulated workers in-process (LocalTransport)");
  for (const std::string& codec : codecs) {
    for (double size : Numbers(absl::GetFlag(FLAGS_sizes))) {
      const v1::RunConfig config = ConfigFor(size, codec);
      const ParamLayout layout = BuiltinLayout(config.model());
      const size_t n = TotalParams(layout);
      const std::vector<Segment> plan = PlanSegments(CodecShapes(layout), *ParseCodec(config.uplink_codec()));
      const uint64_t payload_bytes = PayloadBytes(plan);
      std::vector<std::string> payloads;
      for (double w : Numbers(absl::GetFlag(FLAGS_workers))) {
        const size_t workers = static_cast<size_t>(w);
        if (workers * static_cast<double>(n) > absl::GetFlag(FLAGS_max_work) ||
            workers * static_cast<double>(payload_bytes) > absl::GetFlag(FLAGS_max_payload_gib) * (1 << 30)) {
          std::printf("%-6s %11zu %8zu   skipped (over --max_work or --max_payload_gib)\n", codec.c_str(), n, workers);
          continue;
        }
        if (payloads.empty()) payloads = Payloads(plan, n, 4);
        rows->push_back(InProcess(config, codec, workers, rounds, threads, payloads));
        Print(rows->back());
      }
    }
  }
}

// Part 2 over every codec and client count at --grpc_size.
void Part2(const std::vector<std::string>& codecs, int rounds, std::vector<Row>* rows) {
  PrintHeader("part 2: the gRPC server on loopback, N client threads (close s: not measured)");
  for (const std::string& codec : codecs) {
    const v1::RunConfig config = ConfigFor(absl::GetFlag(FLAGS_grpc_size), codec);
    const ParamLayout layout = BuiltinLayout(config.model());
    const std::vector<Segment> plan = PlanSegments(CodecShapes(layout), *ParseCodec(config.uplink_codec()));
    const std::vector<std::string> payloads = Payloads(plan, TotalParams(layout), 4);
    for (double w : Numbers(absl::GetFlag(FLAGS_grpc_workers))) {
      rows->push_back(OverGrpc(config, codec, static_cast<size_t>(w), rounds, payloads));
      Print(rows->back());
    }
  }
}

absl::Status WriteCsv(const std::string& path, const std::vector<Row>& rows) {
  std::string csv = "part,codec,params,workers,round_s,close_s,mem_mib,up_bytes_per_round,down_bytes_per_round\n";
  for (const Row& r : rows) {
    char line[256];
    std::snprintf(line, sizeof line, "%s,%s,%zu,%zu,%.6f,%.6f,%.1f,%llu,%llu\n", r.part.c_str(), r.codec.c_str(),
                  r.params, r.workers, r.round_s, r.close_s, r.mem_mib, static_cast<unsigned long long>(r.up_bytes),
                  static_cast<unsigned long long>(r.down_bytes));
    csv += line;
  }
  return WriteFileAtomic(path, csv);
}

}  // namespace
}  // namespace muloco

int main(int argc, char** argv) {
  using namespace muloco;
  absl::ParseCommandLine(argc, argv);
  SetMinLogLevel(LogLevel::kError);  // not even the servers' --insecure warning: the tables are the output
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  int threads = absl::GetFlag(FLAGS_push_threads);
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::string> codecs = absl::StrSplit(absl::GetFlag(FLAGS_codecs), ',', absl::SkipEmpty());
  std::vector<Row> rows;
  std::printf("bench/scale: %u cores, %d push threads, %d timed rounds per cell after one untimed\n",
              std::thread::hardware_concurrency(), threads, rounds);
  Part1(codecs, rounds, threads, &rows);
  if (absl::GetFlag(FLAGS_grpc_size) > 0) Part2(codecs, rounds, &rows);
  if (const std::string path = absl::GetFlag(FLAGS_csv); !path.empty()) {
    if (absl::Status s = WriteCsv(path, rows); !s.ok()) {
      std::fprintf(stderr, "scale: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("\nwrote %s\n", path.c_str());
  }
  return 0;
}
