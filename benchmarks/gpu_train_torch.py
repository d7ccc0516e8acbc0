"""A small PyTorch training entry point for the local-backend GPU benchmark (gpu_local_backend.py).

It follows the training-script contract of docs/local-backend.md: hyperparameters from SM_HPS, the
checkpoint in QUOTA_CHECKPOINT_DIR (step, model and optimizer, saved atomically every
``checkpoint_every`` steps and on SIGTERM), metrics in SM_OUTPUT_DATA_DIR, the model in SM_MODEL_DIR.
It trains an MLP to imitate a fixed random linear map, on ``cuda`` when CUDA_VISIBLE_DEVICES grants a
GPU and PyTorch sees one, else on the CPU (and says so).

Hyperparameters: ``steps`` (the full training), ``width``, ``batch``, ``checkpoint_every``,
``report_every``.

What it prints, one ``key=value`` line each, for the benchmark to read:

* ``device=cuda:0 (NAME)`` or ``device=cpu (...)``, once at start;
* ``resumed_from_step=K`` when it resumed from a checkpoint;
* ``first_work_at=UNIX_TIME`` once its first step has run on the device (synchronized);
* ``step=N loss=L`` every ``report_every`` steps;
* ``checkpoint_saved_step=K`` when SIGTERM made it save and exit (code 143);
* ``done step=N`` at the end.

``metrics.json`` in SM_OUTPUT_DATA_DIR holds ``device``, ``peak_memory_bytes`` (the CUDA allocator's
peak, 0 on the CPU), ``resumed_from_step`` and ``last_step``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

import torch
from torch import nn

STOPPED_BY_SIGTERM = 143


class SigtermFlag:
    def __init__(self) -> None:
        self.received = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.received = True


def hyperparameter(hyperparameters: dict[str, object], name: str, default: int) -> int:
    return int(str(hyperparameters.get(name, default)))


def save_atomically(content: object, path: Path) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    torch.save(content, temporary)
    os.replace(temporary, path)


def main() -> int:
    sigterm = SigtermFlag()
    signal.signal(signal.SIGTERM, sigterm)
    hyperparameters: dict[str, object] = json.loads(os.environ.get("SM_HPS", "{}"))
    steps = hyperparameter(hyperparameters, "steps", 1000)
    width = hyperparameter(hyperparameters, "width", 1024)
    batch = hyperparameter(hyperparameters, "batch", 1024)
    checkpoint_every = hyperparameter(hyperparameters, "checkpoint_every", 50)
    report_every = hyperparameter(hyperparameters, "report_every", 25)
    checkpoint_dir = Path(os.environ.get("QUOTA_CHECKPOINT_DIR", "/opt/ml/checkpoints"))
    model_dir = Path(os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    output_dir = Path(os.environ.get("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data"))
    for directory in (checkpoint_dir, model_dir, output_dir):
        directory.mkdir(parents=True, exist_ok=True)

    on_gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "") != "" and torch.cuda.is_available()
    device = torch.device("cuda:0" if on_gpu else "cpu")
    if on_gpu:
        print(f"device=cuda:0 ({torch.cuda.get_device_name(0)})", flush=True)
    else:
        print("device=cpu (no GPU granted or visible: degraded CPU run)", flush=True)

    torch.manual_seed(0)
    teacher = torch.randn(width, 1).to(device)
    model = nn.Sequential(
        nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1)
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    checkpoint = checkpoint_dir / "checkpoint.pt"
    start_step = 0
    if checkpoint.exists():
        saved = torch.load(checkpoint, map_location=device, weights_only=True)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        start_step = int(saved["step"])
        print(f"resumed_from_step={start_step}", flush=True)

    def save(step: int) -> None:
        save_atomically(
            {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, checkpoint
        )

    def write_metrics(last_step: int) -> None:
        peak = torch.cuda.max_memory_allocated(device) if on_gpu else 0
        metrics = {
            "device": str(device),
            "peak_memory_bytes": peak,
            "resumed_from_step": start_step,
            "last_step": last_step,
        }
        (output_dir / "metrics.json").write_text(json.dumps(metrics))

    step = start_step
    for step in range(start_step + 1, steps + 1):
        generator = torch.Generator(device=device).manual_seed(step)
        inputs = torch.randn(batch, width, device=device, generator=generator)
        loss = nn.functional.mse_loss(model(inputs), inputs @ teacher)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step == start_step + 1:
            if on_gpu:
                torch.cuda.synchronize()
            print(f"first_work_at={time.time():.6f}", flush=True)
        if sigterm.received:
            save(step)
            write_metrics(step)
            print(f"checkpoint_saved_step={step}", flush=True)
            return STOPPED_BY_SIGTERM
        if step % checkpoint_every == 0:
            save(step)
        if step % report_every == 0:
            print(f"step={step} loss={loss.item():.5f}", flush=True)

    torch.save(model.state_dict(), model_dir / "model.pt")
    save(step)
    write_metrics(step)
    print(f"done step={step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
