// The Python package's native half (module muloco._muloco): a ModelWorker
// (worker/model_worker.h) driven from Python. It sees the user's model only as float32 buffers, one per tensor in
// the run's layout order (numpy views of the user's CPU tensors, so no copy of the model is
// made on the Python side); compression, error feedback, checksums, retries and the overlap's flight all run here,
// with the GIL released while it talks to the server. python/muloco/__init__.py wraps it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/run_config.h"
#include "common/run_config_fields.h"
#include "kernels/newton_schulz.h"
#include "worker/client.h"
#include "worker/model_worker.h"

namespace py = pybind11;

namespace muloco {
namespace {

using Buffers = std::vector<py::buffer>;

// Each buffer's float32 memory, checked: contiguous, writable, the tensor's element count.
// Nothing is converted, so nothing is written into a copy by mistake.
std::vector<float*> Floats(const Buffers& buffers, const ParamLayout& l) {
  if (buffers.size() != l.size()) throw std::invalid_argument("one buffer per tensor of the run's layout");
  std::vector<float*> out;
  for (size_t t = 0; t < l.size(); ++t) {
    const py::buffer_info b = buffers[t].request(/*writable=*/true);
    if (b.format != py::format_descriptor<float>::format() || b.itemsize != 4) {
      throw std::invalid_argument("buffer of " + l[t].name + " is not float32");
    }
    ssize_t expect = 4;
    for (ssize_t d = b.ndim - 1; d >= 0; --d) {
      if (b.shape[d] > 1 && b.strides[d] != expect) throw std::invalid_argument("buffer of " + l[t].name + " is not contiguous");
      expect *= b.shape[d];
    }
    if (static_cast<size_t>(b.size) != l[t].numel) {
      throw std::invalid_argument("buffer of " + l[t].name + " does not hold its " + std::to_string(l[t].numel) +
                                  " floats");
    }
    out.push_back(static_cast<float*>(b.ptr));
  }
  return out;
}

[[noreturn]] void Raise(const absl::Status& s) { throw std::runtime_error(std::string(s.message())); }

const char* GroupName(ParamGroup g) {
  return g == ParamGroup::kMuon ? "muon" : g == ParamGroup::kAdamW ? "adamw" : "adamw_no_decay";
}

py::dict ResultDict(const SyncResult& r) {
  py::dict out;
  out["round"] = r.round;
  out["applied"] = r.applied;
  out["in_flight"] = r.in_flight;
  out["done"] = r.done;
  out["contributors"] = r.contributors;
  out["checksum"] = r.checksum;
  return out;
}

template <typename T>
T Check(absl::StatusOr<T> v) {
  if (!v.ok()) Raise(v.status());
  return *std::move(v);
}

class PyWorker {
 public:
  PyWorker(const std::string& server, const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
           const std::string& name, std::string token, const std::string& token_file, bool insecure,
           const std::string& tls_ca, const std::string& tls_cert, const std::string& tls_key,
           const std::string& tls_server_name, double heartbeat_s, double connect_timeout_s, double retry_timeout_s,
           bool overlap, uint32_t overlap_steps) {
    WorkerOptions o;
    o.server = server;
    o.name = name;
    o.tls = ClientTls{insecure, tls_ca, tls_cert, tls_key};
    o.tls_server_name = tls_server_name;
    o.heartbeat_s = heartbeat_s;
    o.connect_timeout_s = connect_timeout_s;
    o.retry_timeout_s = retry_timeout_s;
    o.overlap = overlap;
    o.overlap_steps = overlap_steps;
    if (!token_file.empty()) {
      absl::StatusOr<std::string> read = ReadJoinToken(token_file);
      if (!read.ok()) throw std::invalid_argument(std::string(read.status().message()));
      token = *std::move(read);
    }
    ParamLayout model;
    for (const auto& [n, shape] : tensors) model.push_back(ParamInfo{n, shape});
    PlaceTensors(&model);
    if (absl::Status s = ValidateLayout(model); !s.ok()) Raise(s);
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = MakeChannelCredentials(o.tls);
    if (!creds.ok()) Raise(creds.status());
    client_ = std::make_unique<ServerClient>(server, *std::move(creds), ClientOptionsFor(o));
    worker_ = std::make_unique<ModelWorker>(std::move(o), client_.get(), std::move(token), std::move(model));
  }

  // Join, the uplink and heartbeats, and the public model.
  void Join() {
    py::gil_scoped_release free;
    if (absl::Status s = worker_->Join(); !s.ok()) Raise(s);
  }

  // The run's tensors in buffer order: (name, shape, group).
  std::vector<std::tuple<std::string, std::vector<int64_t>, std::string>> Layout() const {
    std::vector<std::tuple<std::string, std::vector<int64_t>, std::string>> out;
    for (const ParamInfo& p : worker_->layout()) out.emplace_back(p.name, p.shape, GroupName(p.group));
    return out;
  }

  // The run configuration's fields by their flag names (run_config_fields.h).
  py::dict Config() const {
    py::dict d;
    const v1::RunConfig& c = worker_->config();
#define MULOCO_FIELD(type, flag, path, base, help) d[#flag] = RunConfigField<type>(c, path);
    MULOCO_RUN_CONFIG_FIELDS(MULOCO_FIELD)
#undef MULOCO_FIELD
    d["preset"] = c.preset();
    return d;
  }

  // θ_pub into the buffers.
  void ReadModel(const Buffers& buffers) const {
    if (absl::Status s = worker_->ReadModel(Floats(buffers, worker_->layout())); !s.ok()) Raise(s);
  }

  // One outer step (ModelWorker::Sync) on the buffers.
  py::dict Sync(const Buffers& buffers, double train_loss, uint64_t tokens, uint32_t steps, double train_seconds) {
    const ModelWorker::Tensors t = Floats(buffers, worker_->layout());
    absl::StatusOr<SyncResult> r;
    {
      py::gil_scoped_release free;
      r = worker_->Sync(t, SyncReport{train_loss, tokens, steps, train_seconds});
    }
    return ResultDict(Check(std::move(r)));
  }

  // Overlap: counts an inner step; whether the flight should land now (then call Land).
  bool LandDue() { return worker_->LandDue(); }
  bool Land(const Buffers& buffers) {
    const ModelWorker::Tensors t = Floats(buffers, worker_->layout());
    py::gil_scoped_release free;
    return Check(worker_->Land(t));
  }

  // Lands a flight still in the air into the buffers (none given: drops it), then leaves.
  void Leave(const std::optional<Buffers>& buffers) {
    std::optional<ModelWorker::Tensors> t;
    if (buffers) t = Floats(*buffers, worker_->layout());
    py::gil_scoped_release free;
    worker_->Leave(t ? &*t : nullptr);
  }

  // The inner learning-rate schedule's factor at global inner step `step` (warmup, then
  // cosine to the floor): muloco-worker's, so a Python loop can follow the run's schedule.
  double LrFactor(uint64_t step) const { return LearningRateFactor(worker_->config(), step); }
  uint64_t Round() const { return worker_->round(); }
  uint64_t Checksum() const { return worker_->checksum(); }
  uint64_t Id() const { return worker_->id(); }
  bool Done() const { return worker_->done(); }
  bool InFlight() const { return worker_->in_flight(); }
  uint32_t InnerSteps() const { return worker_->inner_steps(); }
  size_t NumParams() const { return worker_->num_params(); }

 private:
  std::unique_ptr<ServerClient> client_;
  std::unique_ptr<ModelWorker> worker_;
};

}  // namespace
}  // namespace muloco

namespace muloco {
namespace {

// m (a 2-D float32 buffer) <- NS_steps(m / ||m||_F) * Muon's shape scale under `scale`
// ("shape" or "adamw"): the orthogonalized update of worker/muon.cc, by the project's CPU
// Newton-Schulz (kernels/newton_schulz.h).
void Orthogonalize(const py::buffer& m, int steps, const std::string& scale) {
  const py::buffer_info b = m.request(/*writable=*/true);
  if (b.ndim != 2 || b.format != py::format_descriptor<float>::format() || b.strides[1] != 4 ||
      b.strides[0] != 4 * b.shape[1]) {
    throw std::invalid_argument("orthogonalize: a contiguous 2-D float32 buffer");
  }
  if (scale != "shape" && scale != "adamw") throw std::invalid_argument("orthogonalize: scale is shape or adamw");
  const auto rows = static_cast<size_t>(b.shape[0]), cols = static_cast<size_t>(b.shape[1]);
  const double s = MuonShapeScale(b.shape[0], b.shape[1], scale == "shape" ? MuonScale::kShape : MuonScale::kMatchAdamW);
  py::gil_scoped_release free;
  kernels::cpu::NewtonSchulz(static_cast<float*>(b.ptr), rows, cols, steps, static_cast<float>(s));
}

}  // namespace
}  // namespace muloco

PYBIND11_MODULE(_muloco, m) {
  using muloco::PyWorker;
  m.doc() = "muloco's worker core for Python (see python/muloco/__init__.py)";
  m.def("orthogonalize", &muloco::Orthogonalize, py::arg("m"), py::arg("steps") = 5, py::arg("scale") = "shape");
  py::class_<PyWorker>(m, "Worker")
      .def(py::init<const std::string&, const std::vector<std::pair<std::string, std::vector<int64_t>>>&,
                    const std::string&, std::string, const std::string&, bool, const std::string&, const std::string&,
                    const std::string&, const std::string&, double, double, double, bool, uint32_t>(),
           py::arg("server"), py::arg("tensors"), py::arg("name") = "", py::arg("token") = "", py::arg("token_file") = "",
           py::arg("insecure") = false, py::arg("tls_ca") = "", py::arg("tls_cert") = "", py::arg("tls_key") = "",
           py::arg("tls_server_name") = "", py::arg("heartbeat_s") = 5.0, py::arg("connect_timeout_s") = 60.0,
           py::arg("retry_timeout_s") = 600.0, py::arg("overlap") = false, py::arg("overlap_steps") = 0)
      .def("join", &PyWorker::Join)
      .def("layout", &PyWorker::Layout)
      .def("config", &PyWorker::Config)
      .def("read_model", &PyWorker::ReadModel)
      .def("sync", &PyWorker::Sync, py::arg("buffers"), py::arg("train_loss") = 0.0, py::arg("tokens") = 0,
           py::arg("steps") = 1, py::arg("train_seconds") = 0.0)
      .def("land_due", &PyWorker::LandDue)
      .def("land", &PyWorker::Land)
      .def("leave", &PyWorker::Leave, py::arg("buffers") = std::nullopt)
      .def("lr_factor", &PyWorker::LrFactor, py::arg("step"))
      .def_property_readonly("round", &PyWorker::Round)
      .def_property_readonly("checksum", &PyWorker::Checksum)
      .def_property_readonly("id", &PyWorker::Id)
      .def_property_readonly("done", &PyWorker::Done)
      .def_property_readonly("in_flight", &PyWorker::InFlight)
      .def_property_readonly("inner_steps", &PyWorker::InnerSteps)
      .def_property_readonly("num_params", &PyWorker::NumParams);
}
