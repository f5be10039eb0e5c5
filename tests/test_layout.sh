#!/usr/bin/env bash
# test_layout.sh: the include direction of the source folders, lowest first: util/ (file-system helpers) <- kernels/
# (the operations), data/ (shards, tokenizer, meta.json) <- model/ (config, model, optimizer, sampler) <- persist/
# (checkpoints, state.bin, safetensors, Hugging Face import/export, the run directory) <- cli/ (--help, --generate)
# <- train.c. A folder includes only itself and the folders it is allowed to (docs/DESIGN.md, "Source layout").
source "$(dirname "$0")/shell_helpers.sh"

# check FOLDER ALLOWED...: every #include "X/..." in FOLDER's sources names FOLDER or one of ALLOWED.
check() {
    local folder=$1
    shift
    local allowed="$folder${*:+ $*}" bad=""
    if [ ! -d "$folder" ]; then
        fail "no folder $folder/"
        return
    fi
    while IFS= read -r line; do
        local target=${line#*\"}
        target=${target%%/*}
        case " $allowed " in *" $target "*) ;; *) bad+="${line}; " ;; esac
    done < <(grep -rHE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$folder" \
                 --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh')
    if [ -z "$bad" ]; then
        pass "$folder/ includes only ${allowed// /, }"
    else
        fail "$folder/ includes outside ${allowed// /, }: $bad"
    fi
}

check util
check kernels util
check data util
check model data kernels util
check persist model data kernels util
check cli persist model data kernels util
