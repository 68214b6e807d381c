#!/usr/bin/env bash
# Writes the seed corpus of every fuzz target into tests/fuzz/corpus/. The
# seeds are checked in; run this after changing a harness's input format or
# the protos, and commit the result. Deterministic: same input, same bytes.
set -euo pipefail
cd "$(dirname "$0")/../.."
corpus=tests/fuzz/corpus

# The 8 bytes of a little-endian u64.
u64_le() {
  local value=$1 i
  for ((i = 0; i < 8; i++)); do
    printf "\\x$(printf %02x $(((value >> (8 * i)) & 255)))"
  done
}

# safetensors_header_fuzzer: [data bytes: u64 LE][header JSON].
seed_header() {
  local name=$1 data_bytes=$2 json=$3
  { u64_le "$data_bytes"; printf '%s' "$json"; } \
    >"$corpus/safetensors_header_fuzzer/$name"
}
mkdir -p "$corpus/safetensors_header_fuzzer"
seed_header two_tensors 32 '{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}}'
seed_header every_dtype 64 '{"f64":{"dtype":"F64","shape":[],"data_offsets":[0,8]},"f16":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},"i8":{"dtype":"I8","shape":[4],"data_offsets":[12,16]},"u8":{"dtype":"U8","shape":[4],"data_offsets":[16,20]},"i16":{"dtype":"I16","shape":[2],"data_offsets":[20,24]},"i32":{"dtype":"I32","shape":[2],"data_offsets":[24,32]},"i64":{"dtype":"I64","shape":[3],"data_offsets":[32,56]},"bool":{"dtype":"BOOL","shape":[8],"data_offsets":[56,64]},"empty":{"dtype":"F32","shape":[0,5],"data_offsets":[64,64]}}'
seed_header index 0 '{"metadata":{"total_size":32},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}'
seed_header padded 24 '{"x":{"dtype":"F32","shape":[3,2],"data_offsets":[0,24]}}      '

# model_layout_fuzzer: [nodes-1][local ranks-1][strategy override][JSON]
# (override 0: none; 1-5: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD,
# _HYBRID_SHARD_ZERO2).
seed_layout() {
  local name=$1 prefix=$2
  { printf "$prefix"; cat; } >"$corpus/model_layout_fuzzer/$name"
}
mkdir -p "$corpus/model_layout_fuzzer"
seed_layout gpt_tiny_1x2 '\x00\x01\x00' <examples/gpt_tiny.json
seed_layout design_example_hybrid_2x2 '\x01\x01\x04' <<'EOF'
{"strategy": "FULL_SHARD", "use_orig_params": true, "units": [{"fqn": "", "params": [{"fqn": "embed.w", "shape": [10, 4], "dtype": "float32"}, {"fqn": "head.w", "alias_of": "embed.w"}]}, {"fqn": "layers.0", "params": [{"fqn": "layers.0.w", "shape": [5, 5], "dtype": "float32"}]}]}
EOF
seed_layout fsdp2_hsdp_2x2 '\x01\x01\x00' <<'EOF'
{"kind": "fsdp2", "strategy": "HYBRID_SHARD", "shard_group_size": 4, "units": [{"fqn": "", "params": [{"fqn": "embed.w", "shape": [10, 4], "dtype": "float32"}, {"fqn": "head.w", "alias_of": "embed.w"}, {"fqn": "norm.w", "shape": [3], "dtype": "float32"}]}, {"fqn": "layers.0", "params": [{"fqn": "layers.0.w", "shape": [5, 3], "dtype": "float32"}, {"fqn": "layers.0.v", "shape": [2, 8], "dtype": "float32", "shard_dim": 1}]}]}
EOF
seed_layout flat_bf16_compute_3x3 '\x02\x02\x00' <<'EOF'
{"strategy": "SHARD_GRAD_OP", "use_orig_params": false, "compute_dtype": "bfloat16", "units": [{"fqn": "", "params": [{"fqn": "a", "shape": [7], "dtype": "float32"}, {"fqn": "b", "shape": [3, 3], "dtype": "float32"}, {"fqn": "c", "alias_of": "b"}, {"fqn": "d", "alias_of": "c"}]}, {"fqn": "blocks", "params": [{"fqn": "blocks.x", "shape": [0], "dtype": "float32"}]}, {"fqn": "blocks.1", "params": [{"fqn": "blocks.1.y", "shape": [1, 1, 1], "dtype": "float32"}]}]}
EOF

# rpc_request_fuzzer: frames [rpc][length: u16 LE][serialized request]; the
# rpc numbers are the Rpc enum of rpc_fuzz_frames.h. A seed is a list of
# "RPC_NUMBER MESSAGE_TYPE TEXT_PROTO" lines.
declare -A rpc_numbers=(
  [CreateModel]=0 [DescribeModel]=1 [ListModels]=2 [LoadModel]=3
  [SaveModel]=4 [ModelChecksum]=5 [DeleteModel]=6 [OpenSession]=7
  [GetSession]=8 [ListSessions]=9 [RenewSession]=10 [CloseSession]=11
  [ReadTensor]=12 [WriteTensor]=13 [TensorStats]=14 [ReportPhase]=15
  [MapShards]=16 [Attach]=17 [TrainerHeartbeat]=18 [Detach]=19
  [MarkInitialized]=20 [MapSession]=21 [AddWatch]=22 [ListWatches]=23
  [RemoveWatch]=24 [ShowWatch]=25 [NodeWatchPartials]=26
  [NodeWatchVersions]=27 [NodeWatchFetch]=28 [NodeWatchApply]=29
  [GetClusterStatus]=30
)
frame() {
  local rpc=$1 type=$2 text=$3 payload length
  payload=$(mktemp)
  printf '%s\n' "$text" | protoc -Iproto --encode="summon.v1.$type" \
    proto/summon/v1/summon.proto proto/summon/v1/status.proto \
    proto/summon/v1/trainer.proto \
    proto/summon/v1/peer.proto >"$payload"
  length=$(stat -c %s "$payload")
  printf "\\x$(printf %02x "${rpc_numbers[$rpc]}")"
  printf "\\x$(printf %02x $((length & 255)))\\x$(printf %02x $((length >> 8)))"
  cat "$payload"
  rm -f "$payload"
}
seed_rpc() {
  local name=$1 rpc type text
  while IFS='|' read -r rpc type text; do
    frame "$rpc" "$type" "$text"
  done >"$corpus/rpc_request_fuzzer/$name"
}
mkdir -p "$corpus/rpc_request_fuzzer"
seed_rpc open_read_write_close <<'EOF'
OpenSession|OpenSessionRequest|model: "m"
ReadTensor|ReadTensorRequest|fqn: "embed.w" chunk_bytes: 16
WriteTensor|WriteTensorRequest|header { fqn: "layers.0.b" dtype: DTYPE_FLOAT32 element_count: 5 }
WriteTensor|WriteTensorRequest|data: "\000\000\200?\000\000\000@\000\000@@\000\000\200@\000\000\240@"
TensorStats|TensorStatsRequest|fqns: "layers.0.b" histogram_bins: 4
CloseSession|CloseSessionRequest|
ModelChecksum|ModelChecksumRequest|model: "m"
EOF
seed_rpc options_rank0_grads_bf16 <<'EOF'
OpenSession|OpenSessionRequest|model: "m" options { params { fqns: "head.w" fqns: "layers.0.w" } writeback: false rank0_only: true home_rank: 1 offload_to_cpu: true with_grads: true read_dtype: DTYPE_BFLOAT16 lease_seconds: 5 }
ReadTensor|ReadTensorRequest|fqn: "layers.0.w" grad: true element_offset: 3 element_count: 7
ReadTensor|ReadTensorRequest|fqn: "embed.w" dtype: DTYPE_FLOAT16
GetSession|GetSessionRequest|
RenewSession|RenewSessionRequest|lease_seconds: 30
ListSessions|ListSessionsRequest|model: "m"
CloseSession|CloseSessionRequest|force: true
EOF
seed_rpc create_save_load_delete <<'EOF'
CreateModel|CreateModelRequest|name: "n" layout_json: "{\"strategy\": \"NO_SHARD\", \"units\": [{\"fqn\": \"\", \"params\": [{\"fqn\": \"w\", \"shape\": [3, 2], \"dtype\": \"float16\"}]}]}" strategy: SHARDING_STRATEGY_HYBRID_SHARD init { seeded { seed: 3 } } grads { ranks: 0 }
DescribeModel|DescribeModelRequest|model: "n"
ListModels|ListModelsRequest|
SaveModel|SaveModelRequest|model: "m" path: "m.safetensors"
SaveModel|SaveModelRequest|model: "m" path: "sharded" max_file_bytes: 64
LoadModel|LoadModelRequest|model: "k" path: "m.safetensors" create { unit_prefixes: "layers.0" strategy: SHARDING_STRATEGY_FULL_SHARD use_orig_params: false }
LoadModel|LoadModelRequest|model: "m" path: "sharded"
DeleteModel|DeleteModelRequest|model: "n"
EOF
seed_rpc training_phases <<'EOF'
ReportPhase|ReportPhaseRequest|model: "m" rank: 0 phase: TRAINING_PHASE_FORWARD step: 1
OpenSession|OpenSessionRequest|model: "m" options { module { fqn: "layers.0" recurse: false } }
ReportPhase|ReportPhaseRequest|model: "m" rank: 0 phase: TRAINING_PHASE_IDLE
OpenSession|OpenSessionRequest|model: "m" options { module { fqn: "layers.0" } }
ReportPhase|ReportPhaseRequest|model: "m" rank: 1 phase: TRAINING_PHASE_OPTIMIZER deadline_ms: 10
MapShards|MapShardsRequest|model: "m" rank: 1
CloseSession|CloseSessionRequest|abort: true
EOF
seed_rpc shared_read_only_copy_on_write <<'EOF'
OpenSession|OpenSessionRequest|model: "m" options { writeback: false }
OpenSession|OpenSessionRequest|model: "m" options { writeback: false }
WriteTensor|WriteTensorRequest|header { fqn: "embed.w" dtype: DTYPE_FLOAT32 element_offset: 38 }
WriteTensor|WriteTensorRequest|data: "\000\000\200?\000\000\000@"
ReadTensor|ReadTensorRequest|fqn: "head.w" element_offset: 36
ListSessions|ListSessionsRequest|
CloseSession|CloseSessionRequest|
EOF
# Watches (issue 21): every bad input answers a clear status and the daemon
# goes on; the Peer calls a node answers for watches included.
seed_rpc watch_add_bad_inputs <<'EOF'
AddWatch|AddWatchRequest|model: "m" params: "[" params: "nothing.*"
AddWatch|AddWatchRequest|model: "m" every: -3
AddWatch|AddWatchRequest|model: "m" histogram_bins: 5000
AddWatch|AddWatchRequest|model: "m" histogram_bins: -1
AddWatch|AddWatchRequest|model: "absent"
AddWatch|AddWatchRequest|model: "m" grads: true params: "layers.*"
AddWatch|AddWatchRequest|model: "m" params: "*" every: 2147483647 histogram_bins: 4096
ListWatches|ListWatchesRequest|
EOF
seed_rpc watch_show_remove_bad_inputs <<'EOF'
AddWatch|AddWatchRequest|model: "m" params: "layers.0.*" histogram_bins: 8
ShowWatch|ShowWatchRequest|model: "m" param: "layers.0.w" since: 9223372036854775807
ShowWatch|ShowWatchRequest|model: "m" param: "layers.0.w" since: -9223372036854775808 grad: true
ShowWatch|ShowWatchRequest|model: "m" param: "embed.w"
ShowWatch|ShowWatchRequest|model: "absent" param: "w"
RemoveWatch|RemoveWatchRequest|model: "absent"
RemoveWatch|RemoveWatchRequest|model: "m"
RemoveWatch|RemoveWatchRequest|model: "m"
ShowWatch|ShowWatchRequest|model: "m" param: "layers.0.w"
EOF
seed_rpc cluster_status <<'EOF'
GetClusterStatus|GetClusterStatusRequest|
DeleteModel|DeleteModelRequest|model: "m"
GetClusterStatus|GetClusterStatusRequest|
EOF
seed_rpc watch_partials_bad_inputs <<'EOF'
NodeWatchPartials|NodeWatchPartialsRequest|model: "m" params: "layers.0.w" bins: 1073741824 binned: true lower: 0 upper: 1
NodeWatchPartials|NodeWatchPartialsRequest|model: "m" params: "layers.0.w" bins: -1 binned: true lower: 0 upper: 1
NodeWatchPartials|NodeWatchPartialsRequest|model: "m" params: "layers.0.w" bins: 4 binned: true lower: nan upper: 1
NodeWatchPartials|NodeWatchPartialsRequest|model: "m" params: "layers.0.w" bins: 4 binned: true lower: 2 upper: -inf
NodeWatchPartials|NodeWatchPartialsRequest|model: "m" params: "layers.0.w" bins: 4 binned: true binned: true lower: 0 lower: 0 upper: 1 upper: 1
NodeWatchPartials|NodeWatchPartialsRequest|model: "m" params: "nope" bins: 4
NodeWatchPartials|NodeWatchPartialsRequest|model: "absent" params: "w"
NodeWatchPartials|NodeWatchPartialsRequest|model: "m" params: "embed.w" params: "head.w" grad: true bins: 4 binned: true lower: -1 upper: 1
NodeWatchPartials|NodeWatchPartialsRequest|model: "m" params: "layers.0.b" bins: 3 binned: true lower: 0.5 upper: 0.5
EOF
seed_rpc watch_apply_bad_inputs <<'EOF'
NodeWatchApply|NodeWatchApplyRequest|chunk { kind: WATCH_CHUNK_KIND_REPLACE model: "m" json: "{not json" }
NodeWatchApply|NodeWatchApplyRequest|chunk { kind: WATCH_CHUNK_KIND_REPLACE model: "../x" json: "{}" }
NodeWatchApply|NodeWatchApplyRequest|chunk { model: "m" }
NodeWatchApply|NodeWatchApplyRequest|epoch: 7 chunk { kind: WATCH_CHUNK_KIND_REMOVE model: "m" }
NodeWatchApply|NodeWatchApplyRequest|chunk { kind: WATCH_CHUNK_KIND_RECORD model: "m" previous_step: 3 json: "{\"histories\": []}" }
NodeWatchApply|NodeWatchApplyRequest|chunk { kind: WATCH_CHUNK_KIND_REPLACE model: "m" created_at_unix_ms: 5 json: "{\"model\": \"m\", \"globs\": [], \"every\": 1, \"bins\": 2, \"grads\": false, \"watched\": [\"layers.0.w\"], \"created_by\": \"x\", \"created_at_unix_ms\": 5}" }
NodeWatchApply|NodeWatchApplyRequest|chunk { kind: WATCH_CHUNK_KIND_APPEND model: "m" created_at_unix_ms: 5 json: "{\"histories\": [{\"param\": \"layers.0.w\", \"grad\": false, \"records\": [{\"step\": 1}]}]}" }
NodeWatchApply|NodeWatchApplyRequest|chunk { kind: WATCH_CHUNK_KIND_APPEND model: "m" created_at_unix_ms: 5 json: "{\"histories\": [{\"param\": \"layers.0.w\", \"grad\": false, \"first_nonfinite_step\": 1, \"records\": [{\"step\": 1, \"recorded_at_unix_ms\": 1, \"latency_us\": 1, \"numel\": 25, \"nan\": 0, \"inf\": 0, \"l2_norm\": 1.5, \"mean\": null, \"min\": 0, \"max\": 1, \"abs_max\": 1, \"histogram\": [20, 5], \"below\": 0, \"above\": 0, \"lower\": 0, \"upper\": 1}]}]}" }
NodeWatchApply|NodeWatchApplyRequest|chunk { kind: WATCH_CHUNK_KIND_COMMIT model: "m" created_at_unix_ms: 5 previous_step: 1 }
ShowWatch|ShowWatchRequest|model: "m" param: "layers.0.w"
NodeWatchVersions|NodeWatchVersionsRequest|
NodeWatchFetch|NodeWatchFetchRequest|model: "m"
NodeWatchFetch|NodeWatchFetchRequest|model: "absent"
EOF
