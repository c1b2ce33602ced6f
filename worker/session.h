// A worker's whole life: join, fetch, train rounds, push, apply global updates, leave.
// RunWorker talks gRPC to a server; RunWorkerOver takes any transport (worker/transport.h),
// e.g. an in-process engine.
#pragma once

#include <string>

#include "worker/transport.h"
#include "worker/worker_options.h"

namespace muloco {

// Returns a process exit code: 0 at the end of the run, after --leave_after rounds, or when
// *stop_signal is set.
int RunWorker(const WorkerOptions& options);
// The same over `transport` (options.server and the TLS fields are not used); `token` is
// presented at Join.
int RunWorkerOver(const WorkerOptions& options, Transport* transport, const std::string& token);

}  // namespace muloco
