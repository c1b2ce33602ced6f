"""muloco.SiteWorker: a site of several processes (torchrun; NCCL on GPUs, gloo on CPUs) as
one worker of a run. Every rank holds the same model, as data parallelism inside the site
(DDP, or any scheme that keeps the ranks' parameters equal) does; rank 0 alone speaks to the
server, and after Join and every sync() it broadcasts the public model to the group, so each
rank holds the server's model bit for bit. The site is one participant: its tokens are
summed over the ranks and reported once."""
import torch
import torch.distributed as dist


class SiteWorker:
    """Call on every rank after dist.init_process_group, with the same arguments; the
    Worker's keyword arguments (token_file, tls_ca, insecure, ...) reach rank 0's Worker."""

    def __init__(self, model, server, group=None, **worker_args):
        if worker_args.get("overlap"):
            raise ValueError("overlap is for a single-process Worker: a site's ranks land the model together")
        self.group = group
        self.rank = dist.get_rank(group)
        self._params = [p for _, p in model.named_parameters()]
        self.worker = None
        if self.rank == 0:
            from .worker import Worker
            self.worker = Worker(model, server, **worker_args)
        state = [self.worker.config if self.worker else None, self._round_done()]
        dist.broadcast_object_list(state, src=self._src(), group=group)
        self.config, (self.round, self.done, self._steps, self._factors) = state
        self._broadcast_model()

    @property
    def inner_steps(self):
        """The inner steps to take before the next sync: the run's H, or fewer when the server
        runs --adaptive_h and this site is slower than the others (rank 0's Worker.inner_steps,
        read once a round and sent to every rank with the model)."""
        return self._steps

    def sync(self, loss=0.0, tokens=0):
        """Ends the round on every rank: rank 0 pushes and waits (the others wait for it), then
        every rank receives the new public model. Returns rank 0's sync result on every rank."""
        total = torch.tensor([float(tokens), float(loss)], dtype=torch.float64)
        dist.all_reduce(total, group=self.group)  # the site's tokens; its mean loss
        out = [None]
        if self.worker:
            size = dist.get_world_size(self.group)
            out[0] = self.worker.sync(loss=total[1].item() / size, tokens=int(total[0].item()))
        state = [out[0], self._round_done()]
        dist.broadcast_object_list(state, src=self._src(), group=self.group)
        out[0], (self.round, self.done, self._steps, self._factors) = state
        self._broadcast_model()
        return out[0]

    def leave(self):
        if self.worker:
            self.worker.leave()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.leave()

    def _src(self):
        return dist.get_global_rank(self.group, 0) if self.group is not None else 0

    def lr_factor(self, step):
        """The run's inner schedule at global inner step `step` of the round being trained
        (round * H + i), as Worker.lr_factor: rank 0 sends the round's factors with the model."""
        return self._factors[step - self.round * self.config["inner_steps"]]

    def _round_done(self):
        if not self.worker:
            return None, None, None, None
        w = self.worker
        steps, h = w.inner_steps, w.config["inner_steps"]  # the steps told; what the next sync() claims
        return w.round, w.done, steps, [w.lr_factor(w.round * h + i) for i in range(steps)]

    def _broadcast_model(self):
        with torch.no_grad():
            for p in self._params:
                dist.broadcast(p.data, src=self._src(), group=self.group)
