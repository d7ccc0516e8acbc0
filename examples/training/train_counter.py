"""A tiny training script (stdlib only) that follows the SageMaker script contract, checkpoints and resumes.

It "trains" by updating a deterministic running value once per step, so a run that was stopped at step k
and resumed ends with exactly the value of a run that was never stopped. Runs unchanged as a SageMaker
training job and on the local backend (docs/local-backend.md).

Hyperparameters (SM_HPS, or SM_HP_<NAME> when SM_HPS is absent):

* ``steps`` (default 20): how many steps a full training has;
* ``step_seconds`` (default 0.1): how long one step takes;
* ``ignore_sigterm`` (default false): ignore SIGTERM, to exercise the SIGKILL after the grace period.

Files: the checkpoint ``$QUOTA_CHECKPOINT_DIR/checkpoint.json`` (``{"step": k, "value": v}``, replaced
atomically after every step), and the result ``$SM_MODEL_DIR/result.json`` (``{"steps": n, "value": v}``).

Exit codes: 0 when all steps are done; 143 (128 + SIGTERM) when stopped by SIGTERM after saving its
checkpoint; 2 for a bad hyperparameter.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

STOPPED_BY_SIGTERM = 143
BAD_CONFIGURATION = 2
#: How often a step looks for SIGTERM while it works.
SIGTERM_CHECK_SECONDS = 0.01


def read_hyperparameters(env: dict[str, str]) -> dict[str, str]:
    """Hyperparameters as text, from SM_HPS (JSON) or, without it, from the SM_HP_<NAME> variables."""
    if "SM_HPS" in env:
        decoded = json.loads(env["SM_HPS"])
        return {name: _as_text(value) for name, value in decoded.items()}
    return {name[len("SM_HP_") :].lower(): value for name, value in env.items() if name.startswith("SM_HP_")}


def _as_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def next_value(value: int, step: int) -> int:
    """One training step: a deterministic update that depends on every earlier step."""
    return (value * 31 + step * step) % 1_000_000_007


def write_json_atomically(path: Path, content: dict[str, int]) -> None:
    """Write ``content`` to a temporary file, flush it to disk, then rename it over ``path``."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump(content, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def load_checkpoint(path: Path) -> tuple[int, int]:
    """(step, value) from the checkpoint, or the start (0, 1) when there is none."""
    if not path.exists():
        return 0, 1
    saved = json.loads(path.read_text(encoding="utf-8"))
    return int(saved["step"]), int(saved["value"])


class SigtermFlag:
    """Remembers that SIGTERM arrived; the training loop checks it between and during steps."""

    def __init__(self) -> None:
        self.received = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.received = True


def train(env: dict[str, str]) -> int:
    hyperparameters = read_hyperparameters(env)
    try:
        steps = int(hyperparameters.get("steps", "20"))
        step_seconds = float(hyperparameters.get("step_seconds", "0.1"))
    except ValueError as error:
        print(f"bad hyperparameter: {error}", flush=True)
        return BAD_CONFIGURATION
    ignore_sigterm = hyperparameters.get("ignore_sigterm", "false").lower() == "true"
    checkpoint = Path(env.get("QUOTA_CHECKPOINT_DIR", "/opt/ml/checkpoints")) / "checkpoint.json"
    model_dir = Path(env.get("SM_MODEL_DIR", "/opt/ml/model"))
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    model_dir.mkdir(parents=True, exist_ok=True)

    sigterm = SigtermFlag()
    signal.signal(signal.SIGTERM, sigterm)
    step, value = load_checkpoint(checkpoint)
    job_name = env.get("TRAINING_JOB_NAME", "?")
    if step:
        print(f"{job_name}: resuming from checkpoint at step {step}", flush=True)
    else:
        print(f"{job_name}: starting a new training of {steps} steps", flush=True)

    while step < steps:
        deadline = time.monotonic() + step_seconds
        while True:
            if sigterm.received and ignore_sigterm:
                print("SIGTERM received and ignored (ignore_sigterm=true)", flush=True)
                sigterm.received = False
            if sigterm.received:
                # The step in progress is dropped; the checkpoint holds the last finished one.
                write_json_atomically(checkpoint, {"step": step, "value": value})
                print(
                    f"SIGTERM: checkpoint saved at step {step}; exiting with {STOPPED_BY_SIGTERM}", flush=True
                )
                return STOPPED_BY_SIGTERM
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(SIGTERM_CHECK_SECONDS, remaining))
        step += 1
        value = next_value(value, step)
        write_json_atomically(checkpoint, {"step": step, "value": value})
        print(f"step {step}/{steps} value={value}", flush=True)

    write_json_atomically(model_dir / "result.json", {"steps": steps, "value": value})
    print(f"training complete: {steps} steps, value={value}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(train(dict(os.environ)))
