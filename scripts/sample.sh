#!/usr/bin/env bash
# Sample text from a trained model: scripts/sample.sh EXPORT.safetensors [SHARDS_DIR] [PROMPT]
# EXPORT is muloco-server --export's file; SHARDS_DIR the muloco-prepare directory of a run on
# subword tokens (its tokenizer.model turns the prompt into ids and the sample back into
# text), none for a byte-level run. Extra settings through the environment: TOKENS (200),
# TEMPERATURE (0.8), SEED (1), BUILD (build). LibTorch and libsentencepiece cannot share a
# process (each brings its own protobuf), hence the pipeline.
set -euo pipefail
model=${1:?usage: scripts/sample.sh EXPORT.safetensors [SHARDS_DIR] [PROMPT]}
shards=${2:-}
prompt=${3:-"Q: "}
build=${BUILD:-build}
gen=("$build/muloco-worker" --generate="$model" --sample_tokens="${TOKENS:-200}"
     --temperature="${TEMPERATURE:-0.8}" --sample_seed="${SEED:-1}")
if [ -z "$shards" ]; then
  "${gen[@]}" --prompt="$prompt"
else
  ids=$(printf '%s' "$prompt" | "$build/muloco-prepare" --encode="$shards/tokenizer.model")
  "${gen[@]}" --prompt_ids="$ids" --tokenizer="$shards/tokenizer.model" |
    "$build/muloco-prepare" --decode="$shards/tokenizer.model"
  echo
fi
