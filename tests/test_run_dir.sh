#!/usr/bin/env bash
# test_run_dir.sh: the run directory as something one process holds and a new run replaces only once it is ready.
#   - the lock: while a run trains (held in its checkpoint by the test pause), a second ./train on its directory (a new
#     run, --resume, --overwrite) is refused naming the first's PID, and changes nothing; the first ends normally and
#     leaves no lock file; a lock file left by a killed process does not stop the next run;
#   - --overwrite: a new run that stops before its first checkpoint (a non-finite loss from NaN initial weights) puts
#     the old run back byte for byte; one killed before its first checkpoint is complete leaves the old run set aside,
#     and the next ./train puts it back; one that reaches its first checkpoint removes the old run;
#   - a new run that stops before its first checkpoint and replaced nothing keeps its log and config, nothing else;
#   - data checked before the run directory is written: validation shards with ids outside the vocabulary stop a new
#     run before its directory exists;
#   - a checkpoint this user may not read is a permission error, not damage, and --resume-fallback moves nothing;
#   - a resume to fewer steps than the warmup that the first run clamped to its steps.
source "$(dirname "$0")/shell_helpers.sh"
export OMP_NUM_THREADS=1
check() { if eval "$2"; then pass "$1"; else fail "$1"; fi; }
# snapshot DIR: every file under DIR with its checksum (hidden ones too), and every directory.
snapshot() { (cd "$1" && find . -print0 | sort -z | xargs -0 -I{} sh -c '[ -d "{}" ] && echo "dir {}" || sha256sum "{}"'); }

python3 - "$TMP" <<'EOF'
import struct, sys, random
rng = random.Random(5)
def shard(name, ids):
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(ids)
    open(f"{sys.argv[1]}/{name}", "wb").write(struct.pack("<256i", *header) + struct.pack(f"<{len(ids)}H", *ids))
shard("train_000.bin", [rng.randrange(256) for _ in range(8000)])
shard("val_000.bin", [rng.randrange(256) for _ in range(2000)])
shard("badval_000.bin", [rng.randrange(256) for _ in range(100)] + [300] + [rng.randrange(256) for _ in range(1899)])
EOF
cat >"$TMP/small.json" <<EOF
{"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 64, "tie_word_embeddings": true,
 "train_data": "$TMP/train_*.bin", "val_data": "$TMP/val_*.bin", "tokenizer": "byte", "batch_size": 2, "seq_len": 32,
 "steps": 4, "learning_rate": 3e-3, "eval_every": 2, "eval_batches": 2, "sample_every": 0, "checkpoint_every": 2,
 "keep_last": 0}
EOF
SMALL=(-c "$TMP/small.json")
"$TRAIN" "${SMALL[@]}" -o "$TMP/old" >"$TMP/old.out" 2>&1 || fail "the first run: $(tail -3 "$TMP/old.out")"
OLD=$(snapshot "$TMP/old")

# wait_for FILE PATTERN: until FILE holds a line matching PATTERN (at most 30 s).
wait_for() { for _ in $(seq 600); do grep -qE "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }

# 1. The lock. The first run pauses 3 s in the snapshot and before the rename of its checkpoint.
TRAIN_TEST_CHECKPOINT_PAUSE_MS=3000 "$TRAIN" "${SMALL[@]}" -n 2 --checkpoint-every 0 -o "$TMP/busy" \
    >"$TMP/busy.out" 2>&1 &
busy=$!
wait_for "$TMP/busy.out" "checkpoint test pause: snapshot" || fail "the first run did not reach its checkpoint"
BUSY=$(snapshot "$TMP/busy")
for how in "new run:${SMALL[*]}" "--resume:--resume" "--overwrite:${SMALL[*]} --overwrite"; do
    # shellcheck disable=SC2086
    "$TRAIN" ${how#*:} -o "$TMP/busy" >"$TMP/second.out" 2>&1
    rc=$?
    check "a second ./train on a directory in use (${how%%:*}) is refused naming the first's PID, nothing changed" \
        '[ $rc -ne 0 ] && grep -q "run directory $TMP/busy is in use by another ./train (process $busy, which holds .*\.train\.lock)" "$TMP/second.out" && [ "$BUSY" = "$(snapshot "$TMP/busy")" ]'
done
wait "$busy"
rc=$?
check "the first run ends normally and leaves no lock file" \
    '[ $rc -eq 0 ] && [ -d "$TMP/busy/step_00000002" ] && [ ! -e "$TMP/busy/.train.lock" ]'
TRAIN_TEST_CHECKPOINT_PAUSE_MS=3000 "$TRAIN" -o "$TMP/busy" --resume -n 4 >"$TMP/killed.out" 2>&1 &
busy=$!
wait_for "$TMP/killed.out" "checkpoint test pause: snapshot" || fail "the resumed run did not reach its checkpoint"
{ kill -9 "$busy" && wait "$busy"; } 2>/dev/null
[ -e "$TMP/busy/.train.lock" ] && stale=1 || stale=0
"$TRAIN" -o "$TMP/busy" --resume -n 4 >"$TMP/stale.out" 2>&1
rc=$?
check "a lock file left by a killed run does not stop the next one" \
    '[ $stale -eq 1 ] && [ $rc -eq 0 ] && [ -d "$TMP/busy/step_00000004" ]'

# 2. --overwrite with a run that stops at step 1: initial weights all 1e30 (finite, but the first logits are not).
"$TRAIN" "${SMALL[@]}" --steps 0 -o "$TMP/init" >/dev/null 2>&1
python3 - "$TMP/init/step_00000000/model.safetensors" <<'EOF'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
start = 8 + struct.unpack_from("<Q", b)[0]
b[start:] = struct.pack("<f", 1e30) * ((len(b) - start) // 4)
open(sys.argv[1], "wb").write(b)
EOF
"$TRAIN" "${SMALL[@]}" --init-from "$TMP/init/step_00000000" -o "$TMP/old" --overwrite >"$TMP/nan.out" 2>&1
rc=$?
check "--overwrite with a run that stops at step 1 puts the old run back as it was, and says so" \
    '[ $rc -ne 0 ] && grep -q "step 1: the loss is not finite" "$TMP/nan.out" && grep -q "put back the run that this run was to replace" "$TMP/nan.out" && ! grep -q "as they were" "$TMP/nan.out" && [ "$OLD" = "$(snapshot "$TMP/old")" ]'
"$TRAIN" "${SMALL[@]}" --init-from "$TMP/init/step_00000000" -o "$TMP/fresh" >"$TMP/fresh.out" 2>&1
rc=$?
check "a new run that stops at step 1 and replaced nothing keeps its log, and sets nothing aside" \
    '[ $rc -ne 0 ] && grep -q "not finite" "$TMP/fresh.out" && [ -f "$TMP/fresh/log.jsonl" ] && [ -z "$(ls -A "$TMP/fresh" | grep -v "^log.jsonl$\|^train_config.json$")" ]'

# 3. --overwrite killed before its first checkpoint is complete (in the pause before the rename).
TRAIN_TEST_CHECKPOINT_PAUSE_MS=3000 "$TRAIN" "${SMALL[@]}" -n 2 --checkpoint-every 0 -o "$TMP/old" --overwrite \
    >"$TMP/kill.out" 2>&1 &
pid=$!
wait_for "$TMP/kill.out" "checkpoint test pause: rename" || fail "the --overwrite run did not reach its rename"
{ kill -9 "$pid" && wait "$pid"; } 2>/dev/null
check "killed before its first checkpoint: the old run is set aside in .replaced_run, not removed" \
    '[ -d "$TMP/old/.replaced_run/step_00000004" ] && [ -f "$TMP/old/.replaced_run/log.jsonl" ] && [ ! -e "$TMP/old/step_00000004" ]'
"$TRAIN" -o "$TMP/old" --resume >"$TMP/back.out" 2>&1
rc=$?
check "the next ./train puts the old run back (and finds it complete), the directory as it was" \
    '[ $rc -eq 0 ] && grep -q "put back the run that an interrupted run was to replace" "$TMP/back.out" && grep -q "complete at step 4" "$TMP/back.out" && [ "$OLD" = "$(snapshot "$TMP/old")" ]'

# 4. --overwrite that reaches its first checkpoint: the old run goes.
"$TRAIN" "${SMALL[@]}" -n 2 -o "$TMP/old" --overwrite >"$TMP/over.out" 2>&1
rc=$?
check "--overwrite: once the new run's first checkpoint is complete the old run is removed" \
    '[ $rc -eq 0 ] && grep -q "set aside in .*\.replaced_run" "$TMP/over.out" && grep -q "removed the run that this run replaced" "$TMP/over.out" && [ -d "$TMP/old/step_00000002" ] && [ ! -e "$TMP/old/step_00000004" ] && [ ! -e "$TMP/old/.replaced_run" ]'

# 5. Validation data for another vocabulary: refused before the run directory exists.
"$TRAIN" "${SMALL[@]}" -j "$TMP/badval_*.bin" -o "$TMP/badval" >"$TMP/badval.out" 2>&1
rc=$?
check "validation ids outside the vocabulary stop a new run before its directory exists" \
    '[ $rc -ne 0 ] && grep -q "badval_000.bin: token 100 has id 300, outside the vocabulary" "$TMP/badval.out" && [ ! -e "$TMP/badval" ]'

# 6. A checkpoint this user may not read (as root, the test runs the trainer as nobody, who owns the rest).
cp -r "$TMP/busy" "$TMP/perm"
chmod 755 "$TMP"
as_user=()
if [ "$(id -u)" = 0 ]; then
    chown -R 65534:65534 "$TMP/perm"
    chown 0:0 "$TMP/perm/step_00000004/state.bin"
    as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
chmod 000 "$TMP/perm/step_00000004/state.bin"
PERM=$(snapshot "$TMP/perm")
for fb in "" --resume-fallback; do
    # shellcheck disable=SC2086
    "${as_user[@]}" "$TRAIN" -o "$TMP/perm" --resume $fb -n 6 >"$TMP/perm.out" 2>&1
    rc=$?
    check "a checkpoint file this user may not read: a permission error, not damage, nothing moved (--resume $fb)" \
        '[ $rc -ne 0 ] && grep -q "permission denied: this user may not read .*step_00000004/state.bin" "$TMP/perm.out" && ! grep -q "damaged" "$TMP/perm.out" && [ "$PERM" = "$(snapshot "$TMP/perm")" ]'
done

# 7. The first run's warmup clamped to its 4 steps; resumed from step 2 to 3 steps, inside that warmup.
"$TRAIN" "${SMALL[@]}" --warmup-steps 50 -o "$TMP/warm" >/dev/null 2>&1
rm -rf "$TMP/warm/step_00000004"
"$TRAIN" -o "$TMP/warm" --resume -n 3 >"$TMP/warm.out" 2>&1
rc=$?
check "a resume to fewer steps than the first run's clamped warmup trains them" \
    '[ $rc -eq 0 ] && [ -d "$TMP/warm/step_00000003" ]'
