"""resume.py: what an output directory holds between runs. While a run prepares OUT, OUT/progress.json holds its
settings and the position where its complete shards end (rewritten atomically after every shard); when the run is done,
OUT/meta.json, with the same settings, replaces it. A rerun with the same settings resumes from progress.json (the
partial shard of the interrupted run and any shard it renamed after its last record are removed and written again) or,
when meta.json is there, has nothing to do. A rerun with other settings, or into shards that neither file describes,
stops with a message unless --overwrite, which first removes every file a preparation writes; but one after a run that
completed no shard (a progress.json that lists none, partial .tmp shards) starts again whatever the settings were."""
import json
import os
import re

from dataprep.errors import PrepError

PROGRESS = "progress.json"
META = "meta.json"
WRITTEN = re.compile(r"^((train|val)_\d{6}\.bin|meta\.json|progress\.json)(\.tmp)?$")


def write_json(path, obj):
    """Writes path atomically: a temporary file, synced, renamed over it."""
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
    except OSError as e:
        raise PrepError(f"cannot write {path}: {e.strerror}")


def read_record(path):
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise PrepError(f"cannot read {path} ({e}): pass --overwrite to prepare the directory again")
    if not isinstance(record, dict):
        raise PrepError(f"{path} is not a JSON object: pass --overwrite to prepare the directory again")
    return record


def settings_differ(path, record, settings, what):
    old = record.get("settings")
    if not isinstance(old, dict):
        problem = "was written by an earlier version of prepare_data.py"
    else:
        keys = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
        problem = f"has other settings ({', '.join(keys)} differ)"
    return PrepError(f"{path} ({what}) {problem}: pass --overwrite to remove its shards and prepare it again, or "
                     "choose another --out")


def listed_shards(record):
    """The shards a progress record lists as complete; None if it is not a record of this version's form."""
    splits = record.get("splits")
    if not isinstance(splits, dict) or not all(isinstance(s, dict) and isinstance(s.get("files"), list)
                                               for s in splits.values()):
        return None
    return {name for split in splits.values() for name in split["files"]}


def open_out_dir(out, settings, overwrite):
    """("fresh", None), ("resume", progress record) or ("complete", meta) for the existing directory out (locked),
    after the clean-up described above."""
    written = sorted(name for name in os.listdir(out) if WRITTEN.match(name))
    if overwrite or all(name.endswith(".tmp") for name in written):
        remove(out, written)
        return "fresh", None
    if META in written:
        meta = read_record(os.path.join(out, META))
        if meta.get("settings") != settings:
            raise settings_differ(os.path.join(out, META), meta, settings, "a complete preparation")
        return "complete", meta
    if PROGRESS in written:
        record = read_record(os.path.join(out, PROGRESS))
        listed = listed_shards(record)
        if listed == set():  # the earlier run completed no shard: nothing to keep
            remove(out, written)
            return "fresh", None
        if record.get("settings") != settings:
            raise settings_differ(os.path.join(out, PROGRESS), record, settings, "an unfinished preparation")
        if listed is None:
            raise PrepError(f"{os.path.join(out, PROGRESS)} does not list its splits' shards: pass --overwrite to "
                            "prepare the directory again")
        missing = sorted(listed - set(written))
        if missing:
            raise PrepError(f"{os.path.join(out, PROGRESS)} lists the shard {missing[0]}, which is not in {out}: pass "
                            "--overwrite to prepare the directory again")
        remove(out, [name for name in written if name not in listed and name != PROGRESS])
        return "resume", record
    if written:
        raise PrepError(f"--out {out} holds {', '.join(written[:3])}{' ...' if len(written) > 3 else ''} without a "
                        f"{META} or {PROGRESS} that says what they are: pass --overwrite to remove them, or choose "
                        "another --out")
    return "fresh", None


def remove(out, names):
    for name in names:
        try:
            os.remove(os.path.join(out, name))
        except OSError as e:
            raise PrepError(f"cannot remove {os.path.join(out, name)}: {e.strerror}")
