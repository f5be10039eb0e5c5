#!/usr/bin/env bash
# test_layout.sh: the include direction of the source folders, lowest first: util/ (file-system helpers) <- kernels/
# (the operations), data/ (shards, tokenizer, meta.json) <- model/ (config, model, optimizer, sampler) <- persist/
# (checkpoints, state.bin, safetensors, Hugging Face import/export, the run directory) <- cli/ (--help, --generate)
# <- train.c. A folder includes only itself and the folders it is allowed to (docs/DESIGN.md, "Source layout"). Also:
# git ignores the datasets generated under data/.
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

# Inside the CUDA backend (kernels/cuda): the Hopper instruction wrappers (hopper/) include nothing of the project;
# the engine (gemm/) nothing of the backend around it (its cuda_* files, the model's math in cuda_math.cuh, fused/,
# attention/); attention/ and train.c nothing of the fused table (fused/), whose ops reach the program only through
# kernels.h's table.
# refuse FILES_OR_FOLDER PREFIX...: no #include "X" in them where X starts with a PREFIX.
refuse() {
    local where=$1
    shift
    local hits=""
    for prefix in "$@"; do
        hits+=$(grep -rHE "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"$prefix" "$where" \
                    --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' | tr '\n' ' ')
    done
    if [ -z "$hits" ]; then
        pass "$where includes nothing under $*"
    else
        fail "$where includes $hits"
    fi
}
refuse kernels/cuda/hopper kernels/ util/
refuse kernels/cuda/gemm kernels/cuda/cuda_ kernels/cuda/fused/ kernels/cuda/attention/ kernels/kernels.h
refuse kernels/cuda/attention kernels/cuda/fused/
refuse train.c kernels/cuda/

# The datasets that make data, make data-code and prepare_data.py write under data/ are ignored by git; the data/
# sources are not. (Only in a git checkout.)
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    generated=(data/tinyshakespeare_byte/train_000000.bin data/tinyshakespeare_llama3/meta.json
               data/pystdlib_llama3/val_000000.bin data/mycorpus/progress.json)
    if [ "$(git check-ignore "${generated[@]}" | wc -l)" -eq 4 ] &&
        ! git check-ignore -q data/dataloader.c && ! git check-ignore -q data/meta.h; then
        pass "git ignores the generated datasets under data/ and not the sources there"
    else
        fail "git ignores: $(git check-ignore "${generated[@]}" data/dataloader.c data/meta.h | tr '\n' ' ')"
    fi
fi
