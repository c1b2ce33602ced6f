"""muloco.Worker and muloco.save_initial (see the package's docstring)."""
import os
import signal
import sys

import numpy as np
import torch

from . import safetensors
from ._muloco import Worker as _NativeWorker


def save_initial(model, path, metadata=None):
    """Writes the model's parameters (float32, under their PyTorch names) as the run's initial
    model for muloco-server --init_model."""
    tensors = [(name, p.detach().to("cpu", torch.float32).numpy()) for name, p in model.named_parameters()]
    safetensors.write(path, tensors, metadata)


class Worker:
    """One worker of a run, training `model` (a torch.nn.Module, or anything with
    named_parameters()). Leaves the run on SIGTERM (and exits 0), on leave(), or at the end
    of a `with` block.

    overlap=True hides the exchange behind compute, as muloco-worker --overlap: sync() pushes
    and returns at once, the loop trains the next round from its own parameters, and
    after_step() (call it after each inner step) rebases them onto the new public model when
    it arrives, or after exactly `overlap_steps` steps when that is set (reproducible runs)."""

    def __init__(self, model, server, name="", token=None, token_file=None, insecure=False, tls_ca="", tls_cert="",
                 tls_key="", tls_server_name="", heartbeat_s=5.0, connect_timeout_s=60.0, retry_timeout_s=600.0,
                 leave_on_sigterm=True, overlap=False, overlap_steps=0):
        self._params = dict(model.named_parameters())
        self._told_steps = None  # the inner steps last read from `inner_steps`: what sync() claims
        tensors = [(n, list(p.shape)) for n, p in self._params.items()]
        self._native = _NativeWorker(server, tensors, name=name or f"py-{os.getpid()}",
                                     token=token or "", token_file=token_file or "", insecure=insecure, tls_ca=tls_ca,
                                     tls_cert=tls_cert, tls_key=tls_key, tls_server_name=tls_server_name,
                                     heartbeat_s=heartbeat_s, connect_timeout_s=connect_timeout_s,
                                     retry_timeout_s=retry_timeout_s, overlap=overlap, overlap_steps=overlap_steps)
        self._native.join()
        self.config = self._native.config()
        self.layout = self._native.layout()  # [(name, shape, group)] in the run's order
        self._order = [self._params[n] for n, _, _ in self.layout]
        self._left = False
        if leave_on_sigterm:
            signal.signal(signal.SIGTERM, self._on_sigterm)
        self._exchange(lambda buffers: self._native.read_model(buffers))

    @property
    def round(self):
        """The round being trained (with overlap: the one after the push in flight)."""
        return self._native.round

    @property
    def done(self):
        return self._native.done

    @property
    def inner_steps(self):
        """The inner steps to take before the next sync: the run's H, or fewer when the server
        runs --adaptive_h and this worker is slower than the others (read it each round).
        sync() without `steps` reports the value last read here."""
        self._told_steps = self._native.inner_steps
        return self._told_steps

    @property
    def checksum(self):
        """xxh64 of the public model this worker holds: the server's, bit for bit."""
        return self._native.checksum

    def lr_factor(self, step):
        """The run's inner learning-rate schedule at global inner step `step` (round * H + i):
        linear warmup, then cosine to the floor, as muloco-worker follows it. Multiply the
        peak (config["inner_lr"], or config["muon_lr"]) by it."""
        return self._native.lr_factor(int(step))

    def optimizers(self):
        """The run's inner optimizers for the model, with its settings: muloco.Muon for the
        "muon" group when the run's inner optimizer is muon (muon_lr, muon_momentum, ns_steps,
        muon_scale, muon_weight_decay), AdamW for the rest (inner_lr, betas, adam_eps, weight
        decays). Call set_lr(step) before each step, and step each of them."""
        from .muon import Muon
        c, groups = self.config, self.parameter_groups()
        adam = [g for g in groups if c["inner_optimizer"] != "muon" or g["group"] != "muon"]
        out = [torch.optim.AdamW(adam, lr=c["inner_lr"], betas=(c["beta1"], c["beta2"]), eps=c["adam_eps"])]
        muon = [g for g in groups if c["inner_optimizer"] == "muon" and g["group"] == "muon"]
        if muon:
            out.append(Muon(muon[0]["params"], lr=c["muon_lr"], momentum=c["muon_momentum"], ns_steps=c["ns_steps"],
                            weight_decay=c["muon_weight_decay"], scale=c["muon_scale"]))
        self._optimizers = out
        return out

    def set_lr(self, step):
        """Sets the learning rates of optimizers() to the run's schedule at global inner step
        `step` (round * H + i): the peak (inner_lr, or muon_lr for Muon) times lr_factor(step)."""
        from .muon import Muon
        factor = self.lr_factor(step)
        for opt in getattr(self, "_optimizers", []):
            peak = self.config["muon_lr"] if isinstance(opt, Muon) else self.config["inner_lr"]
            for g in opt.param_groups:
                g["lr"] = peak * factor

    def parameter_groups(self):
        """The model's parameters as optimizer groups by the run's rule (--adamw_params):
        [{"params": [...], "group": "muon" | "adamw" | "adamw_no_decay", "weight_decay": ...}],
        for torch.optim.AdamW (or Muon for the "muon" group) with the run's settings."""
        groups = {}
        for (name, _, group), p in zip(self.layout, self._order):
            groups.setdefault(group, []).append(p)
        decay = {"muon": self.config["muon_weight_decay"], "adamw": self.config["weight_decay"], "adamw_no_decay": 0.0}
        return [{"params": ps, "group": g, "weight_decay": decay[g]} for g, ps in groups.items()]

    def sync(self, loss=0.0, tokens=0, steps=None, train_seconds=0.0):
        """Ends the round: pushes θ_pub − θ, waits for the round to close and writes the new
        public model into the parameters. Returns {"round", "applied", "in_flight", "done",
        "contributors", "checksum"}; "applied" False: the round's work was dropped (the push
        came too late, or the worker was resynced) and the parameters hold the server's
        model. With overlap it lands the flight still in the air (waiting for it), pushes and
        returns at once ("in_flight" True)."""
        if steps is None:
            steps = self._told_steps or self.inner_steps
        return self._exchange(lambda buffers: self._native.sync(buffers, float(loss), int(tokens), int(steps),
                                                                float(train_seconds)))

    def after_step(self):
        """With overlap, after each inner step: rebases the parameters onto the new public
        model once it is due (θ += θ_pub,new − θ_pushed). Returns whether it landed."""
        if not self._native.land_due():
            return False
        self._exchange(lambda buffers: self._native.land(buffers))
        return True

    def save_final(self, path):
        """The parameters as raw little-endian float32 in the run's order: muloco-server
        --save_final's format, so the two files compare byte for byte."""
        with torch.no_grad():
            np.concatenate([p.detach().to("cpu", torch.float32).numpy().ravel() for p in self._order]) \
                .astype("<f4").tofile(path)

    def leave(self):
        """Leaves the run, after landing a flight still in the air (the parameters then hold
        the run's model)."""
        if not self._left:
            self._left = True
            if self._native.in_flight:
                self._exchange(lambda buffers: self._native.leave(buffers))
            else:
                self._native.leave()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.leave()

    def _on_sigterm(self, signum, frame):
        if not self._left:  # a flight still in the air is dropped: SIGTERM does not wait for its round
            self._left = True
            self._native.leave()
        sys.exit(0)

    def _exchange(self, call):
        """Runs `call` on one float32 buffer per tensor (in the run's order): views of CPU
        float32 contiguous parameters, host copies of the others (written back after)."""
        buffers, copies = [], []
        with torch.no_grad():
            for p in self._order:
                if p.device.type == "cpu" and p.dtype == torch.float32 and p.is_contiguous():
                    buffers.append(p.detach().numpy())
                else:
                    host = np.ascontiguousarray(p.detach().to("cpu", torch.float32).numpy())
                    buffers.append(host)
                    copies.append((p, host))
            result = call(buffers)
            for p, host in copies:
                p.copy_(torch.from_numpy(host).reshape(p.shape))
        return result
