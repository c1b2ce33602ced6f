"""--overlap hides communication behind compute: over slow links (rate-limited loopback
proxies, one per worker) a worker that trains the next round while the last one is pushed,
aggregated and sent back waits for the server almost never, where the same run without
overlap waits for every round's transfers; the replicas stay bit-identical to the server's
model and the validation loss stays within 2% of the run without overlap (with the updates
landing after a fixed number of steps, --overlap_steps, so that it does not depend on timing)."""
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
        # The loss is compared on a run whose updates land after a fixed 50 steps: landing on
        # arrival makes the trajectory depend on timing (finals from -2% to +4% of the plain
        # run were seen here), which a 2% bound cannot hold.
        fixed = self.run_pair("fixed", "--overlap", "--overlap_steps=50")
        for texts in (plain, overlapped, fixed):
            for t in texts:
                self.assertEqual(len(waits(t)), ROUNDS, t)
        # The last round has nothing left to train beside its exchange: leave it out. Per round
        # the least waiting worker's wait: a faster worker also waits for the slower one to
        # push, which is not the link's cost and which overlap cannot hide.
        def link_wait(texts):
            return statistics.mean(min(ws) for ws in zip(*(waits(t)[:-1] for t in texts)))
        wait_plain, wait_overlap = link_wait(plain), link_wait(overlapped)
        loss_plain = statistics.mean(final_val(t) for t in plain)
        loss_fixed = statistics.mean(final_val(t) for t in fixed)
        print(f"waited per round: {wait_plain:.2f} s without overlap, {wait_overlap:.2f} s with; "
              f"final val loss {loss_plain:.4f} without, {loss_fixed:.4f} with updates landing after 50 steps, "
              f"{statistics.mean(final_val(t) for t in overlapped):.4f} landing on arrival")
        self.assertGreater(wait_plain, 0.2)  # the link really costs time without overlap
        self.assertLess(wait_overlap, 0.25 * wait_plain)
        self.assertLess(abs(loss_fixed - loss_plain) / loss_plain, 0.02)
        self.assertIn("rebased", overlapped[0])
        self.assertRegex(fixed[0], r"rebased onto round \d+'s model after 50 of 100 steps")


if __name__ == "__main__":
    unittest.main()
