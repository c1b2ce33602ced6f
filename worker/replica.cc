// Replica::Apply (see replica.h).
#include "worker/replica.h"

#include "absl/strings/str_cat.h"
#include "codec/checksum.h"
#include "codec/codec.h"

namespace muloco {

absl::Status Replica::Apply(const RoundResult& update) {
  if (update.round != model_.round) {
    return absl::FailedPreconditionError(
        absl::StrCat("update closes round ", update.round, ", the replica is at round ", model_.round));
  }
  if (absl::Status s = DecodeAccumulate(update.payload, model_.params.size(), model_.params.data()); !s.ok()) {
    return s;
  }
  if (ParamChecksum(model_.params.data(), model_.params.size()) != update.checksum) {
    return absl::DataLossError("checksum mismatch after applying the update");
  }
  model_.round = update.next_round;
  model_.checksum = update.checksum;
  return absl::OkStatus();
}

}  // namespace muloco
