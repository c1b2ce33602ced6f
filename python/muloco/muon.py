"""muloco.Muon: the project's Muon as a torch.optim.Optimizer, for the 2-D hidden matrices
(Worker.parameter_groups()' "muon" group): momentum as an EMA with Nesterov's look-ahead,
the update orthogonalized by muloco's C++ Newton-Schulz (kernels/newton_schulz.h, on the
CPU) and scaled by the run's rule, decoupled weight decay; the update of worker/muon.cc."""
import torch

from ._muloco import orthogonalize


class Muon(torch.optim.Optimizer):
    def __init__(self, params, lr=0.02, momentum=0.95, nesterov=True, ns_steps=5, weight_decay=0.0, scale="shape"):
        if scale not in ("shape", "adamw"):
            raise ValueError("scale is shape or adamw")
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps,
                                      weight_decay=weight_decay, scale=scale))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta, lr, wd = group["momentum"], group["lr"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.dim() != 2:
                    raise ValueError("Muon takes 2-D parameters only")
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.lerp_(p.grad, 1 - beta)
                u = p.grad.lerp(buf, beta) if group["nesterov"] else buf
                host = u.detach().to("cpu", torch.float32).contiguous().clone()
                orthogonalize(host.numpy(), group["ns_steps"], group["scale"])
                if wd:
                    p.mul_(1 - lr * wd)
                p.add_(host.to(p.device, p.dtype), alpha=-lr)
        return loss
