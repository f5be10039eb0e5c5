"""walk.py: what --text's directories and glob patterns name: a directory's files, recursively, and a pattern's matches
(* ? [...] within a name, ** for any depth of directories), as glob.glob(pattern, recursive=True) gives them. Hidden
names are left out; symbolic links are followed, each directory once (a link back to a directory already walked adds
nothing). What cannot be entered or read (a directory without permission, a dangling or looping link, a special file)
is added to a list of problems, each naming its path, instead of being left out in silence."""
import errno
import fnmatch
import os
import re
import stat

MAGIC = re.compile(r"[*?[]")


def kind(path, problems):
    """What path is: "dir", "file", or None (after adding why to problems)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if not os.path.islink(path):
            problems.append(f"{path}: cannot read it ({e.strerror})")
        elif e.errno == errno.ELOOP:
            problems.append(f"{path}: a symbolic link that loops")
        elif e.errno == errno.ENOENT:
            problems.append(f"{path}: a symbolic link to {os.readlink(path)}, which does not exist")
        else:
            problems.append(f"{path}: a symbolic link to {os.readlink(path)}, which cannot be reached ({e.strerror})")
        return None
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    problems.append(f"{path}: not a regular file or a directory")
    return None


def tree(directory, problems, visited=None):
    """(path, is a directory) of everything under directory, not hidden, depth first, each directory once."""
    if visited is None:
        visited = {os.stat(directory)[1:3]}  # (inode, device) of the directories walked
    try:
        entries = sorted(os.listdir(directory))
    except OSError as e:
        problems.append(f"{directory}: cannot read the directory ({e.strerror})")
        return
    for name in entries:
        path = os.path.join(directory, name)
        what = None if name.startswith(".") else kind(path, problems)
        if what == "file":
            yield path, False
        elif what == "dir" and os.stat(path)[1:3] not in visited:
            visited.add(os.stat(path)[1:3])
            yield path, True
            yield from tree(path, problems, visited)


def directory_files(directory, problems):
    """The files under directory, sorted by path."""
    return sorted(path for path, is_dir in tree(directory, problems) if not is_dir)


def glob_matches(pattern, problems):
    """The paths that pattern matches (files and directories), sorted."""
    absolute = pattern.startswith("/")
    parts = [part for part in pattern.split("/") if part]
    paths = ["/" if absolute else ""]
    for i, part in enumerate(parts):
        last, matched = i == len(parts) - 1, []
        for base in paths:
            if part == "**":
                if os.path.isdir(base or "."):  # the directory itself, and every one under it
                    matched.append(base or "." if last else base)
                    if not last:  # (as the last part, the directory stands for all it holds)
                        matched += [path[0 if base else 2 :] for path, is_dir in tree(base or ".", problems) if is_dir]
            elif MAGIC.search(part):
                matched += [os.path.join(base, name) for name in names(base or ".", problems)
                            if fnmatch.fnmatchcase(name, part) and (part[0] == "." or name[0] != ".")]
            else:
                matched.append(os.path.join(base, part))
        paths = matched
    return sorted({path for path in paths if path and os.path.lexists(path)})


def names(directory, problems):
    """The names in a directory; none for one that is not there or not a directory (the pattern does not match)."""
    try:
        return os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        problems.append(f"{directory}: cannot read the directory ({e.strerror})")
        return []
