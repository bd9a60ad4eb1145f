#!/usr/bin/env bash
# One verl GRPO step through `arena train trainer=verl` on ONE GPU, within 10 minutes; prints one JSON line.
#
#   MODEL=Qwen/Qwen3-0.6B bash infra/gpu_smoke.sh        # on a GPU machine with the project installed
#
# Steps: synthesize a few library tasks, export them for verl, run one GRPO step (rollout.n=2, 4 tasks,
# the vLLM rollout where vLLM imports, else the hf one: trainers/verl/hf_rollout.py, transformers'
# generate on the same GPU, slower; FSDP actor and ref; a checkpoint with its Hugging Face export), then
# read verl's console metrics of step 1. Output, one line: {"ok", "step_time_s", "tokens_per_s", "reward_mean", "checkpoint",
# "model", "rollout", "log"} or {"ok": false, "error": ...}. Needs: the project installed (verl, TransferQueue),
# the model reachable (a local folder or the Hugging Face hub). Nothing in CI runs this script.
set -uo pipefail

MODEL=${MODEL:-Qwen/Qwen3-0.6B}
ENV_NAME=${ENV_NAME:-library}
TIMEOUT_S=${TIMEOUT_S:-600}
WORK=${WORK:-$(mktemp -d -t arena-gpu-smoke-XXXXXX)}
PY=${PYTHON:-python3}
export ARENA_HOME=${ARENA_HOME:-$WORK/home}

fail() {
    "$PY" -c 'import json, sys; print(json.dumps({"ok": False, "error": sys.argv[1], "log": sys.argv[2]}))' \
        "$1" "$WORK/train.log"
    exit 1
}

nvidia-smi -L >/dev/null 2>&1 || fail "no GPU: nvidia-smi -L failed"
"$PY" -c 'import verl, transfer_queue' 2>/dev/null || fail "verl or TransferQueue not importable (pip install -e .)"
ROLLOUT=vllm
"$PY" -c 'import vllm' 2>/dev/null || ROLLOUT=hf
mkdir -p "$WORK"
: >"$WORK/train.log"

# 4 tasks per step, 2 rollouts each: enough for GRPO groups with both verdicts on a small model
arena synth env="$ENV_NAME" n=8 difficulty=1 >>"$WORK/train.log" 2>&1 || fail "arena synth failed"
arena tasks export --format verl "$WORK/data" --env "$ENV_NAME" --val-fraction 0 >>"$WORK/train.log" 2>&1 ||
    fail "arena tasks export failed"

timeout "$TIMEOUT_S" arena train trainer=verl model.path="$MODEL" \
    data.train_files="$WORK/data/train.parquet" data.val_files="$WORK/data/train.parquet" \
    data.train_batch_size=4 data.max_prompt_length=2048 data.max_response_length=2048 \
    actor_rollout_ref.actor.ppo_mini_batch_size=2 actor_rollout_ref.rollout.n=2 \
    actor_rollout_ref.rollout.name="$ROLLOUT" actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \
    trainer.total_training_steps=1 trainer.save_freq=1 trainer.test_freq=-1 trainer.val_before_train=false \
    trainer.nnodes=1 trainer.n_gpus_per_node=1 trainer.logger=[console] \
    trainer.default_local_dir="$WORK/ckpt" arena.envs=["$ENV_NAME"] arena.workers_per_env=2 \
    >>"$WORK/train.log" 2>&1
status=$?
[ "$status" -eq 124 ] && fail "arena train did not finish within ${TIMEOUT_S} s"
[ "$status" -ne 0 ] && fail "arena train exited with $status"

"$PY" - "$WORK" "$MODEL" "$ROLLOUT" <<'EOF'
import json, re, sys
from pathlib import Path

work, model, rollout = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
log = (work / "train.log").read_text(errors="replace")
lines = [line for line in log.splitlines() if re.search(r"\bstep:1 - ", line)]
if not lines:
    print(json.dumps({"ok": False, "error": "no 'step:1' metrics line in the log", "log": str(work / "train.log")}))
    sys.exit(1)
metrics = dict(re.findall(r"([\w/@.-]+):(-?[\d.eE+-]+|nan|inf)", lines[-1].split("step:1 - ", 1)[1]))
hf = work / "ckpt" / "global_step_1" / "actor" / "huggingface"
value = lambda key: float(metrics[key]) if key in metrics else None  # noqa: E731
print(json.dumps({
    "ok": hf.is_dir(),
    "step_time_s": value("timing_s/step"),
    "tokens_per_s": value("perf/throughput"),
    "reward_mean": value("critic/score/mean"),
    "checkpoint": str(hf) if hf.is_dir() else None,
    "model": model,
    "rollout": rollout,
    "log": str(work / "train.log"),
}))
EOF
