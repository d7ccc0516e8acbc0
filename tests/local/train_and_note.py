"""Entry point of the local-backend tests: notes what the job saw, then runs train_counter.py.

A JSON line per start and per exit goes to ``$QUOTA_LOCAL_LOG`` (when set): at the start the job name,
CUDA_VISIBLE_DEVICES, the checkpoint step it starts from, its directories and its PID; at the exit the
exit code and the checkpoint step. The training is train_counter's, in this same process (so it leads the
process group and gets the signals).
"""

from __future__ import annotations

import json
import os
import runpy
import time
from pathlib import Path
from typing import Any

TRAIN_COUNTER = Path(__file__).resolve().parents[2] / "examples" / "training" / "train_counter.py"


def note(entry: dict[str, Any]) -> None:
    log = os.environ.get("QUOTA_LOCAL_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as file:
            file.write(json.dumps({"job": os.environ["TRAINING_JOB_NAME"], "t": time.time(), **entry}) + "\n")


def checkpoint_step() -> int:
    checkpoint = Path(os.environ["QUOTA_CHECKPOINT_DIR"]) / "checkpoint.json"
    return int(json.loads(checkpoint.read_text())["step"]) if checkpoint.exists() else 0


if __name__ == "__main__":
    channels = json.loads(os.environ["SM_CHANNELS"])
    note(
        {
            "event": "start",
            "devices": os.environ["CUDA_VISIBLE_DEVICES"],
            "resumed_from": checkpoint_step(),
            "checkpoint_dir": os.environ["QUOTA_CHECKPOINT_DIR"],
            "model_dir": os.environ["SM_MODEL_DIR"],
            "channels": {name: os.environ[f"SM_CHANNEL_{name.upper()}"] for name in channels},
            "pid": os.getpid(),
        }
    )
    try:
        runpy.run_path(str(TRAIN_COUNTER), run_name="__main__")
    except SystemExit as exit_status:
        note({"event": "exit", "code": exit_status.code, "step": checkpoint_step()})
        raise
