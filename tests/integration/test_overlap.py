"""--overlap hides communication behind compute: over slow links (rate-limited loopback
proxies, one per worker) a worker that trains the next round while the last one is pushed,
aggregated and sent back waits for the server almost never, where the same run without
overlap waits for every round's transfers; the replicas stay bit-identical to the server's
model and the validation loss stays within 2% of the run without overlap."""
import re
import statistics
import unittest

from harness import TINY, ClusterTest, Proxy

# Bytes per second, each direction: a 2-bit round trip (~10 KB each way) takes ~0.35 s, under
# half a round's training (0.85 s on an idle machine, 1.4 s with ctest's other test beside
# it). At 40 KB/s an idle machine trained nearly as fast as the link moved a round, and the
# exchange sometimes outlasted the training.
RATE = 60_000
ROUNDS = 12
RUN = [*TINY, "--preset=muloco-2bit", f"--rounds={ROUNDS}", "--inner_steps=100", "--eval_every=0",
       "--min_quorum=2", "--chunk_bytes=4096"]


def waits(text):
    """Seconds each round waited for the server, in round order."""
    return [float(w) for w in re.findall(r"round \d+: train_loss .* waited ([0-9.]+) s", text)]


def final_val(text):
    return float(re.search(r"final: val_loss ([0-9.]+)", text).group(1))


class Overlap(ClusterTest):
    def run_pair(self, tag, *worker_flags):
        server, addr = self.start_server(*RUN, f"--save_final={self.path(tag + 'server.bin')}",
                                         name=tag + "server")
        port = int(addr.split(":")[1])
        workers = []
        for i in range(2):
            proxy = Proxy(port, RATE)
            workers.append(self.start_worker(f"127.0.0.1:{proxy.port}", f"--save_final={self.path(f'{tag}w{i}.bin')}",
                                             "--chunk_bytes=4096", "--heartbeat_s=1", f"--name={tag}w{i}",
                                             *worker_flags, name=f"{tag}w{i}"))
        for w in workers:
            self.assertEqual(w.wait(timeout=300), 0, w.text())
        self.assertEqual(server.wait(timeout=60), 0, server.text())
        for i in range(2):  # replicas bit-identical to the server's θ_pub
            self.assertEqual(self.read_bytes(f"{tag}w{i}.bin"), self.read_bytes(tag + "server.bin"))
        return [w.text() for w in workers]

    def test_overlap_hides_the_link_and_keeps_the_loss(self):
        plain = self.run_pair("plain")
        overlapped = self.run_pair("overlap", "--overlap")
        for texts in (plain, overlapped):
            for t in texts:
                self.assertEqual(len(waits(t)), ROUNDS, t)
        # The last round has nothing left to train beside its exchange: leave it out.
        wait_plain = statistics.mean(w for t in plain for w in waits(t)[:-1])
        wait_overlap = statistics.mean(w for t in overlapped for w in waits(t)[:-1])
        loss_plain = statistics.mean(final_val(t) for t in plain)
        loss_overlap = statistics.mean(final_val(t) for t in overlapped)
        print(f"waited per round: {wait_plain:.2f} s without overlap, {wait_overlap:.2f} s with; "
              f"final val loss {loss_plain:.4f} without, {loss_overlap:.4f} with")
        self.assertGreater(wait_plain, 0.2)  # the link really costs time without overlap
        self.assertLess(wait_overlap, 0.25 * wait_plain)
        self.assertLess(abs(loss_overlap - loss_plain) / loss_plain, 0.02)
        self.assertIn("rebased", overlapped[0])


if __name__ == "__main__":
    unittest.main()
