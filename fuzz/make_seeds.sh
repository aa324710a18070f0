#!/usr/bin/env bash
# Rewrites the generated and copied seeds of fuzz/corpus/:
#   request_fuzz      requests written as text protos below, encoded with protoc
#   snapshot_fuzz     snapshot_seed_gen (the real snapshot encoder)
#   tokenizer_fuzz    make_tokenizer_seeds.py (the test models' tokenizers, cut down)
#   safetensors_fuzz  the bundled exit classifier, the test checkpoints' headers, one small file
#                     per dtype
#   model_config_fuzz the config.json of every test model and of the bundled one
# Seeds written by hand (utf8_fuzz; model_config_fuzz's *.hand.json) are left as they are.
#
#   fuzz/make_seeds.sh BUILD_DIR     (scripts/fuzz.sh --make-seeds builds and runs it)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$1"

# --- request_fuzz: [selector][serialized request]; selector = kind + 16 * model variant
# (request_fuzz.cc's kKinds and ModelFor). One line per seed: NAME SELECTOR TYPE TEXT-PROTO.
requests=$(cat <<'EOF'
generate_prompt 0 GenerateRequest prompt: "Hello, world" max_new_tokens: 16 sampling { temperature: 0.7 top_k: 40 top_p: 0.9 seed: 7 }
generate_session 16 GenerateRequest session_id: "chat-1" prompt: "caf\303\251 \344\270\255" stop: "\n\n" stop: "END" logprobs: 5 stop_at_eos: false
generate_ids 1 GenerateRequest prompt_token_ids: [72, 101, 108] stop_token_ids: [257] sampling { logit_bias { key: 5 value: -100 } logit_bias { key: 7 value: 2.5 } min_p: 0.05 presence_penalty: 0.5 frequency_penalty: -0.5 repetition_penalty: 1.1 }
generate_early_exit 48 GenerateRequest prompt: "x" early_exit { enabled: true threshold: 0.9 measure: EXIT_MEASURE_HIDDEN_SATURATION } recall { enabled: true max_lambda: 0.5 min_match_bytes: 12 }
generate_classifier 48 GenerateRequest prompt: "x" early_exit { enabled: true measure: EXIT_MEASURE_CLASSIFIER }
generate_knn_lm 0 GenerateRequest prompt: "def " knn_lm { datastore: "stdlib" lambda: 0.25 k: 16 temperature: 10 }
score_text 1 ScoreRequest session_id: "s.2" text: "The quick brown fox" update_memory: true token_logprobs: true knn_lm { datastore: "session" }
score_ids 17 ScoreRequest token_ids: [256, 72, 105] recall { max_lambda: 0.9 }
tokenize 2 TokenizeRequest text: "na\303\257ve" add_special_tokens: true
detokenize 3 DetokenizeRequest ids: [72, 105, 257] skip_special_tokens: true
create_session 4 CreateSessionRequest session_id: "my-session_01" knn_capacity: 4096 remember: true remember_capacity: 100000 ttl_seconds: 3600 pinned: true
get_session 5 GetSessionRequest session_id: "my-session_01"
list_sessions 6 ListSessionsRequest page_size: 2
list_sessions_token 6 ListSessionsRequest page_size: 1 page_token: "azpi"
delete_session 7 DeleteSessionRequest session_id: "gone"
export_session 8 ExportSessionRequest session_id: "s" chunk_bytes: 65536
import_session 9 ImportSessionRequest session_id: "copy" data: "MNEMOSNP\001\000\000\000"
fork_session 10 ForkSessionRequest session_id: "a" new_session_id: "b"
list_models 11 ListModelsRequest page_size: 1
get_model 12 GetModelRequest name: "mnemo-stdlib"
list_datastores 13 ListDatastoresRequest page_size: 3 page_token: "azpkb2Nz"
get_datastore 14 GetDatastoreRequest name: "session" session_id: "s1"
add_to_datastore 15 AddToSessionDatastoreRequest session_id: "s1" text: "remember this"
EOF
)
out="$root/fuzz/corpus/request_fuzz"
mkdir -p "$out"
while read -r name selector type text; do
  {
    printf "\\$(printf '%03o' "$selector")"
    protoc --proto_path="$root/proto" --encode="mnemo.v1.$type" "$root"/proto/mnemo/v1/*.proto \
      <<<"$text"
  } >"$out/$name"
done <<<"$requests"
# Two that must fail as bad UTF-8 (raw bytes where protoc's text format would refuse them).
printf '\000\022\003a\377b' >"$out/generate_bad_utf8"
printf '\000B\005\012\003\300\257x' >"$out/generate_bad_utf8_nested"
echo "make_seeds: $(ls "$out" | wc -l) request seeds in $out"

# --- snapshot_fuzz ---------------------------------------------------------------------------
out="$root/fuzz/corpus/snapshot_fuzz"
mkdir -p "$out"
OMP_NUM_THREADS=1 "$build_dir/snapshot_seed_gen" "$out"

# --- tokenizer_fuzz --------------------------------------------------------------------------
python3 "$root/fuzz/make_tokenizer_seeds.py" "$root" "$root/fuzz/corpus/tokenizer_fuzz"

# --- safetensors_fuzz ------------------------------------------------------------------------
out="$root/fuzz/corpus/safetensors_fuzz"
mkdir -p "$out"
cp "$root/models/mnemo-stdlib/exit_classifier.safetensors" "$out/exit_classifier"
python3 - "$root" "$out" <<'PY'
import json, os, struct, sys
root, out = sys.argv[1], sys.argv[2]
# The test checkpoints' headers with no data after them: real names, shapes and metadata.
for name in ("gpt2", "llama", "qwen2"):
    with open(os.path.join(root, "tests/data/hf", name, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = f.read(n)
    with open(os.path.join(out, name + "-header"), "wb") as f:
        f.write(struct.pack("<Q", n) + header)
# One small tensor per dtype, with metadata.
dtypes = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1}
shapes = [[2, 3], [3], [1, 2, 2], [], [2], [0, 4], [4], [5], [2, 2]]
header, data = {"__metadata__": {"format": "pt", "note": "fuzz seed"}}, b""
for i, (dtype, size) in enumerate(dtypes.items()):
    count = 1
    for d in shapes[i]:
        count *= d
    header["t_" + dtype.lower()] = {"dtype": dtype, "shape": shapes[i],
                                    "data_offsets": [len(data), len(data) + count * size]}
    data += bytes((7 * j + i) % 251 for j in range(count * size))
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
with open(os.path.join(out, "every-dtype"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + data)
PY
echo "make_seeds: $(ls "$out" | wc -l) safetensors seeds in $out"

# --- model_config_fuzz -----------------------------------------------------------------------
out="$root/fuzz/corpus/model_config_fuzz"
mkdir -p "$out"
for name in gpt2 llama llama3 mistral qwen2; do
  cp "$root/tests/data/hf/$name/config.json" "$out/$name.json"
done
cp "$root/models/mnemo-stdlib/config.json" "$out/mnemo-stdlib.json"
echo "make_seeds: $(ls "$out" | wc -l) config seeds in $out"
