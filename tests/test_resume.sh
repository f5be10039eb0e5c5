#!/usr/bin/env bash
# test_resume.sh: checkpoints, resume and Hugging Face init through ./train, on a small model (D=32, 2 layers, GQA,
# untied) with gradient accumulation 2, validation and samples on.
# - bit-exact resume: 3 steps + --resume to 6 gives the same log and the same final weights, Adam moments, data
#   position and sampler state as 6 straight steps (with accumulation, and with one micro-batch a step); a crash
#   after a checkpoint that does not divide the run (step 4 of 6, with a later log record, a torn log line and a
#   half-written checkpoint left behind) resumes to the same end;
# - damaged checkpoints (a flipped byte, a truncated or missing file, a state of another model) and bad flags: a
#   message naming the file and the section, a nonzero exit, and not a byte of the run directory changed;
#   --resume-fallback takes the previous checkpoint and moves the damaged one aside;
# - SIGINT: the step finishes, a checkpoint is written, exit 0, and --resume continues bit-exactly; after the last
#   step it says the run is complete;
# - --steps 0 writes the initial weights; --init-from that checkpoint gives bitwise the same master weights, and
#   through a BF16 export the bf16-rounded ones.
# state.bin is parsed by an independent reader of the documented layout (tests/run_compare.py), CRCs included.
set -u
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
TRAIN=${TRAIN:-$(pwd)/train}
# Small shapes: one thread is faster than two on a busy 2-core machine, and determinism does not depend on it.
export OMP_NUM_THREADS=1
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; }
check() { if eval "$2"; then pass "$1"; else fail "$1"; fi; }

python3 - "$TMP" <<'EOF'
import struct, sys, random
rng = random.Random(3)
for name, n in [("train_000.bin", 20000), ("val_000.bin", 4000)]:
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, n
    open(f"{sys.argv[1]}/{name}", "wb").write(struct.pack("<256i", *header) + struct.pack(f"<{n}H", *[rng.randrange(256) for _ in range(n)]))
EOF
cat >"$TMP/small.json" <<EOF
{"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
 "tie_word_embeddings": false, "train_data": "$TMP/train_*.bin", "val_data": "$TMP/val_*.bin", "tokenizer": "byte",
 "batch_size": 2, "seq_len": 32, "total_batch_tokens": 128, "steps": 6, "learning_rate": 3e-3, "warmup_steps": 2,
 "eval_every": 3, "eval_batches": 2, "sample_every": 3, "sample_tokens": 12, "checkpoint_every": 4, "keep_last": 0}
EOF
SMALL=(-c "$TMP/small.json")

# same_run A B [plain]: the two runs' logs agree record by record (all but the timings; unless plain, they hold
# validation losses and samples) and their last checkpoints hold the same model.safetensors and the same state
# (every section but the config, which names the run directory).
same_run() { python3 "$(dirname "$0")/run_compare.py" "$1" "$2" "${3:-}"; }

# snapshot DIR: a listing of every file under DIR with its checksum.
snapshot() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }

# expect_refused NAME RUN PATTERN ARGS...: ./train ARGS exits nonzero, stderr matches PATTERN, RUN is unchanged.
expect_refused() {
    local name=$1 run=$2 pattern=$3
    shift 3
    local before
    before=$(snapshot "$run")
    "$TRAIN" "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    if [ $rc -ne 0 ] && grep -qE -- "$pattern" "$TMP/err" && [ "$before" = "$(snapshot "$run")" ]; then
        pass "$name: exit $rc, run directory unchanged: $(head -c 300 "$TMP/err" | tr '\n' ' ')"
    else
        fail "$name: exit $rc, stderr: $(head -c 400 "$TMP/err" | tr '\n' ' ') (wanted /$pattern/ and no change)"
    fi
}

# 1. 6 straight steps (checkpoints at 4 and 6).
"$TRAIN" "${SMALL[@]}" -o "$TMP/straight" >"$TMP/straight.out" 2>&1 || fail "straight run: $(tail -3 "$TMP/straight.out")"
check "the straight run wrote checkpoints at steps 4 and 6 and printed them" \
    '[ -f "$TMP/straight/step_00000004/state.bin" ] && [ -f "$TMP/straight/step_00000006/model.safetensors" ] && grep -q "^checkpoint .*step_00000006 (.* MiB, .* s)" "$TMP/straight.out"'

# 2. 3 steps, then --resume to 6. The schedule must not depend on the total steps for this to equal the straight run:
#    constant after warmup; both runs use it.
"$TRAIN" "${SMALL[@]}" --lr-schedule constant -o "$TMP/const6" >/dev/null 2>&1
"$TRAIN" "${SMALL[@]}" --lr-schedule constant -n 3 -o "$TMP/const3" >"$TMP/c3.out" 2>&1 &&
    "$TRAIN" -o "$TMP/const3" --resume -n 6 >"$TMP/c3r.out" 2>&1 || fail "3 + resume: $(tail -3 "$TMP/c3r.out")"
check "the resumed run started after step 3" 'grep -q "resumed from .*step_00000003" "$TMP/c3r.out" && grep -q "^step     4/6" "$TMP/c3r.out" && ! grep -q "^step     3/" "$TMP/c3r.out"'
same_run "$TMP/const6" "$TMP/const3"
# 2b. The same with one micro-batch a step, where the blocks' activations share the gradients' memory (model.h,
#     ModelLayout; at 1 x 16 the top block's fit in the other's gradients): the resume is bit-exact there too.
ONE=(--lr-schedule constant -b 1 -t 16 --total-batch-tokens 16)
"$TRAIN" "${SMALL[@]}" "${ONE[@]}" -o "$TMP/one6" >"$TMP/one6.out" 2>&1 ||
    fail "one micro-batch, 6 steps: $(tail -3 "$TMP/one6.out")"
"$TRAIN" "${SMALL[@]}" "${ONE[@]}" -n 3 -o "$TMP/one3" >/dev/null 2>&1 &&
    "$TRAIN" -o "$TMP/one3" --resume -n 6 >"$TMP/one3r.out" 2>&1 || fail "one micro-batch, 3 + resume: $(tail -3 "$TMP/one3r.out")"
check "one micro-batch a step: the resumed run started after step 3" 'grep -q "resumed from .*step_00000003" "$TMP/one3r.out"'
same_run "$TMP/one6" "$TMP/one3"
# The summary of a resumed run counts this process's steps and the whole run's validation losses: the log's step-3
# value (set here far below any real one) stays the best.
"$TRAIN" "${SMALL[@]}" --lr-schedule constant -n 3 -o "$TMP/val3" >/dev/null 2>&1
python3 -c "import json,sys; p=sys.argv[1]; r=[json.loads(l) for l in open(p)]; [x.update(val_loss=0.5) for x in r if 'val_loss' in x]; open(p,'w').write(''.join(json.dumps(x)+'\n' for x in r))" "$TMP/val3/log.jsonl"
"$TRAIN" -o "$TMP/val3" --resume -n 6 >"$TMP/val3r.out" 2>&1
check "a resumed run's summary: steps 4-6, the last validation loss of step 6, the best of step 3 from the log" \
    'grep -q "^steps 4-6 of 6: 384 tokens," "$TMP/val3r.out" && grep -qE "^validation loss: [0-9.]+ at step 6 \(the last\), best 0.5000 at step 3$" "$TMP/val3r.out"'

# 3. A crash after step 5 of the cosine run: the checkpoint of step 4 (checkpoint_every 4 does not divide 6), log
#    records of step 5 and a torn line, a half-written checkpoint directory.
cp -r "$TMP/straight" "$TMP/crash"
rm -rf "$TMP/crash/step_00000006"
python3 - "$TMP/crash/log.jsonl" <<'EOF'
import json, sys
lines = [l for l in open(sys.argv[1]) if json.loads(l)["step"] <= 5]
open(sys.argv[1], "w").write("".join(lines) + '{"step":6,"lo')
EOF
mkdir -p "$TMP/crash/.step_00000006.tmp" && head -c 1000 "$TMP/straight/step_00000006/state.bin" >"$TMP/crash/.step_00000006.tmp/state.bin"
"$TRAIN" -o "$TMP/crash" --resume >"$TMP/crash.out" 2>&1 || fail "resume after a crash: $(tail -3 "$TMP/crash.out")"
check "resume took step_00000004, ignored and removed the half-written .step_00000006.tmp, dropped the later log lines" \
    'grep -q "resumed from .*step_00000004" "$TMP/crash.out" && [ ! -e "$TMP/crash/.step_00000006.tmp" ] && grep -q "dropped 2 log records after step 4" "$TMP/crash.out"'
same_run "$TMP/straight" "$TMP/crash"

# 4. Damaged checkpoints and bad flags: refused, nothing changed.
cp -r "$TMP/straight" "$TMP/dmg"
STATE6="$TMP/dmg/step_00000006/state.bin"
cp "$STATE6" "$TMP/state6.good"
python3 - "$STATE6" <<'EOF'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n_params, at = struct.unpack_from("<Q", b, 24)[0], 72
while b[at:at + 16].rstrip(b"\0") != b"adam_v":  # the sections' headers, as state_file.h lays them out
    at += 32 + struct.unpack_from("<Q", b, at + 16)[0] + 4
b[at + 32 + 4 * (n_params // 2)] ^= 0x10
open(sys.argv[1], "wb").write(b)
EOF
expect_refused "a flipped byte in adam_v of the newest checkpoint" "$TMP/dmg" \
    "step_00000006/state.bin.*\"adam_v\".*CRC mismatch.*previous complete checkpoint is .*step_00000004.*--resume-fallback" \
    -o "$TMP/dmg" --resume
head -c 5000 "$TMP/state6.good" >"$STATE6"
expect_refused "a truncated state.bin" "$TMP/dmg" "step_00000006/state.bin.*truncated" -o "$TMP/dmg" --resume
cp "$TMP/state6.good" "$STATE6"
mv "$TMP/dmg/step_00000006/model.safetensors" "$TMP/model6"
expect_refused "a missing model.safetensors" "$TMP/dmg" "step_00000006/model.safetensors is missing" -o "$TMP/dmg" --resume
mv "$TMP/model6" "$TMP/dmg/step_00000006/model.safetensors"
sed 's/"intermediate_size": 64/"intermediate_size": 96/' "$TMP/small.json" >"$TMP/wide.json"
"$TRAIN" -c "$TMP/wide.json" --steps 0 -o "$TMP/wide" >/dev/null 2>&1
cp "$TMP/wide/step_00000000/state.bin" "$STATE6"
expect_refused "a state.bin of another model shape" "$TMP/dmg" "step_00000006/state.bin was saved for another model: its intermediate_size is 96" -o "$TMP/dmg" --resume
cp "$TMP/state6.good" "$STATE6"
expect_refused "--resume with a new batch size" "$TMP/dmg" "batch_size would change from 2" -o "$TMP/dmg" --resume -b 1
expect_refused "--resume with another model's config" "$TMP/dmg" "differ on intermediate_size \(64 vs 96\)" -c "$TMP/wide.json" -o "$TMP/dmg" --resume
expect_refused "--resume of a finished run to fewer steps" "$TMP/dmg" "at step 6, beyond steps = 5" -o "$TMP/dmg" --resume -n 5
mkdir -p "$TMP/logonly" && echo '{"step":1,"loss":5}' >"$TMP/logonly/log.jsonl"
expect_refused "--resume without a checkpoint (the message names --overwrite)" "$TMP/logonly" "holds no complete checkpoint.*--overwrite" -o "$TMP/logonly" --resume
expect_refused "a new run over a run with checkpoints" "$TMP/dmg" "already holds a run.*--resume" "${SMALL[@]}" -o "$TMP/dmg"
mkdir -p "$TMP/badinit" && printf 'garbage' >"$TMP/badinit/model.safetensors" && cp "$TMP/straight/step_00000006/config.json" "$TMP/badinit/"
expect_refused "--init-from a broken model.safetensors over an existing run (--overwrite)" "$TMP/dmg" \
    "badinit/model.safetensors.*(too short|header length)" "${SMALL[@]}" --init-from "$TMP/badinit" -o "$TMP/dmg" --overwrite

# 5. --resume-fallback: the flipped byte again; the previous checkpoint is taken and the run ends where it should.
python3 - "$STATE6" <<'EOF'
import sys
b = bytearray(open(sys.argv[1], "rb").read()); b[200] ^= 1; open(sys.argv[1], "wb").write(b)
EOF
"$TRAIN" -o "$TMP/dmg" --resume --resume-fallback >"$TMP/fb.out" 2>&1 || fail "--resume-fallback: $(tail -3 "$TMP/fb.out")"
check "--resume-fallback warns about step_00000006, resumes from step_00000004 and moves the damaged one aside" \
    'grep -q "warning: checkpoint .*step_00000006 is damaged" "$TMP/fb.out" && grep -q "resumed from .*step_00000004" "$TMP/fb.out" && [ -d "$TMP/dmg/damaged_step_00000006" ]'
same_run "$TMP/straight" "$TMP/dmg"

# 6. SIGINT in the middle of a long run: the step finishes, a checkpoint is written, exit 0; --resume continues.
LONG=("${SMALL[@]}" --lr-schedule constant --eval-every 0 --sample-every 0 --checkpoint-every 0 --log-every 1)
"$TRAIN" "${LONG[@]}" -n 100000 -o "$TMP/sig" >"$TMP/sig.out" 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q "^step  *3/" "$TMP/sig.out" && break; sleep 0.05; done
kill -INT "$pid"
wait "$pid"
rc=$?
N=$(python3 -c "import json,sys; print(max(json.loads(l)['step'] for l in open(sys.argv[1])))" "$TMP/sig/log.jsonl" 2>/dev/null || echo 0)
CK=$(printf "%s/sig/step_%08d" "$TMP" "$N")
check "SIGINT: exit 0 after step $N, a checkpoint of that step, and a message saying how to resume" \
    '[ $rc -eq 0 ] && [ "$N" -ge 3 ] && [ -f "$CK/state.bin" ] && grep -q "stopped by a signal after step $N.*--resume" "$TMP/sig.out"'
M=$((N + 3))
"$TRAIN" -o "$TMP/sig" --resume -n "$M" >"$TMP/sigr.out" 2>&1 || fail "resume after SIGINT: $(tail -3 "$TMP/sigr.out")"
"$TRAIN" "${LONG[@]}" -n "$M" -o "$TMP/sigref" >/dev/null 2>&1
same_run "$TMP/sigref" "$TMP/sig" plain

# 6b. SIGINT during the last step: the run is complete, and it says so (not "continue with --resume"). The signal
# lands while the checkpoint of step 5 pauses in its snapshot (the test hook), so that the stop is seen after step 6.
TRAIN_TEST_CHECKPOINT_PAUSE_MS=3000 "$TRAIN" "${LONG[@]}" -n 6 --checkpoint-every 5 -o "$TMP/siglast" \
    >"$TMP/siglast.out" 2>"$TMP/siglast.err" &
pid=$!
for _ in $(seq 200); do grep -qs "test pause: snapshot of step 5" "$TMP/siglast.err" && break; sleep 0.05; done
kill -INT "$pid"
wait "$pid"
rc=$?
check "SIGINT during the last step: exit 0, the final checkpoint, and 'the run is complete'" \
    '[ $rc -eq 0 ] && [ -f "$TMP/siglast/step_00000006/state.bin" ] && grep -q "stopped by a signal after the last step (6): the run is complete" "$TMP/siglast.out" && ! grep -q -- "--resume" "$TMP/siglast.out"'

# 7. --steps 0 writes the initial weights; --init-from them (F32, then through BF16) starts from the same weights.
"$TRAIN" "${SMALL[@]}" --steps 0 -o "$TMP/init0" >"$TMP/init0.out" 2>&1
check "--steps 0 writes step_00000000 and no step record" \
    '[ -f "$TMP/init0/step_00000000/model.safetensors" ] && [ -f "$TMP/init0/step_00000000/config.json" ] && ! grep -q "\"loss\"" "$TMP/init0/log.jsonl"'
"$TRAIN" "${SMALL[@]}" --init-from "$TMP/init0/step_00000000" --steps 0 -o "$TMP/init1" >"$TMP/init1.out" 2>&1
"$TRAIN" --init-from "$TMP/init0/step_00000000" -i "$TMP/train_*.bin" -t 32 -b 2 --steps 0 -o "$TMP/init2" >"$TMP/init2.out" 2>&1
"$TRAIN" "${SMALL[@]}" --steps 0 --export-dtype bf16 -o "$TMP/bf0" >/dev/null 2>&1
"$TRAIN" "${SMALL[@]}" --init-from "$TMP/bf0/step_00000000" --steps 0 --export-dtype bf16 -o "$TMP/bf1" >/dev/null 2>&1
python3 - "$TMP" <<'EOF'
import json, struct, sys
sys.path.insert(0, "tests")
import run_compare
tmp = sys.argv[1]
def sections(run):
    return run_compare.state_sections(f"{tmp}/{run}/step_00000000/state.bin")
def master(run):
    # the fp32 master weights that state.bin holds (the BF16 export's); an F32 export's are model.safetensors
    m = sections(run)["master"]
    return struct.unpack(f"<{len(m) // 4}I", m)
def same_file(a, b, name="model.safetensors"):
    return open(f"{tmp}/{a}/step_00000000/{name}", "rb").read() == open(f"{tmp}/{b}/step_00000000/{name}", "rb").read()
def check(ok, msg): print(("PASS " if ok else "FAIL ") + msg)
m0 = master("bf0")  # the initial weights of the seed, unrounded
check(same_file("init0", "init1") and sections("init1")["master_file"] == sections("init0")["master_file"],
      "--init-from our own F32 export (with -c): the same model.safetensors, which holds the master weights")
check(same_file("init0", "init2") and same_file("init0", "init2", "config.json"),
      "--init-from without -c takes the model from its config.json: the same weights and config.json")
hdr = open(f"{tmp}/bf0/step_00000000/model.safetensors", "rb").read()
h = json.loads(hdr[8:8 + struct.unpack_from("<Q", hdr)[0]])
cfg = json.load(open(f"{tmp}/bf0/step_00000000/config.json"))
check(all(v["dtype"] == "BF16" for k, v in h.items() if k != "__metadata__") and cfg["torch_dtype"] == "bfloat16",
      "--export-dtype bf16: every tensor BF16, torch_dtype bfloat16")
rne = lambda u: ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
check(master("bf1") == tuple(rne(u) for u in m0) and same_file("bf0", "bf1"),
      "--init-from BF16 weights: the masters are the bf16-rounded initial weights, and export the same file again")
EOF
if "$TRAIN" "${SMALL[@]}" --init-from "$TMP/bf0/step_00000000" -n 2 -o "$TMP/bftrain" >"$TMP/bft.out" 2>&1 \
    && grep -q "initial weights: .*bf0/step_00000000" "$TMP/bft.out" && [ -f "$TMP/bftrain/step_00000002/state.bin" ]; then
    pass "training from --init-from bf16 weights runs and checkpoints"
else
    fail "training from bf16 weights: $(tail -3 "$TMP/bft.out")"
fi
