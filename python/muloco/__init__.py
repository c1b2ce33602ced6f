"""muloco for PyTorch: train your own model with a muloco server.

    import muloco
    muloco.save_initial(model, "init.safetensors")   # once; then: muloco-server --init_model=init.safetensors
    worker = muloco.Worker(model, "server:7070", token_file="token")
    opt = torch.optim.AdamW(worker.parameter_groups(), lr=worker.config["inner_lr"])
    while not worker.done:
        for _ in range(worker.inner_steps):
            ...  # your forward, backward and optimizer step
        worker.sync(loss=loss.item(), tokens=tokens_seen)

Worker joins with the same TLS and token options as muloco-worker, checks the model against
the run's layout (the server refuses a model that differs, naming the tensor), loads the
public model into it, and sync() pushes the pseudo-gradient (compressed, with error
feedback, checksummed: all in C++, muloco._muloco), waits for the round and writes the new
public model into the model's parameters in place (Worker(overlap=True): pushes and returns
at once, and after_step() rebases the parameters when the new model arrives). No copy of the
model is kept on the Python side: CPU float32 parameters are handed over as views."""

import importlib

__all__ = ["Worker", "save_initial", "Muon", "SiteWorker"]


def __getattr__(name):
    """Worker and save_initial load PyTorch and the native module on first use, so that
    `import muloco.v1.muloco_pb2` (the protocol's messages, beside this package) and
    `from muloco import safetensors` stay light."""
    if name == "Muon":
        return importlib.import_module("muloco.muon").Muon
    if name == "SiteWorker":
        return importlib.import_module("muloco.site").SiteWorker
    if name in __all__:
        return getattr(importlib.import_module("muloco.worker"), name)
    raise AttributeError(f"module 'muloco' has no attribute {name!r}")
