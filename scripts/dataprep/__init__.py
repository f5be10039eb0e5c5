"""dataprep: the pieces of scripts/prepare_data.py: inputs and their readers, the tokenizer and its worker pool, the
shard writer, the resume record and the progress bar."""
