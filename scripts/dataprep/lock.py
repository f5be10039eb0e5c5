"""lock.py: one preparation at a time per output directory: an advisory lock (flock) on OUT/.prepare_data.lock, taken
before anything in OUT is read or written and held until the run ends; a second run into OUT is refused with the
holder's PID. OUT is created here when missing, and removed at the end if the run leaves it empty (a run that failed
before its first shard)."""
import errno
import fcntl
import os

from dataprep.errors import PrepError

LOCK = ".prepare_data.lock"


class OutDirLock:
    def __init__(self, out):
        self.out, self.path, self.fd = out, os.path.join(out, LOCK), None

    def __enter__(self):
        if os.path.exists(self.out) and not os.path.isdir(self.out):
            raise PrepError(f"--out {self.out} exists and is not a directory")
        self.created = not os.path.exists(self.out)
        while self.fd is None:
            try:
                os.makedirs(self.out, exist_ok=True)
            except OSError as e:
                raise PrepError(f"cannot create the output directory {self.out}: {e.strerror}")
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:
                continue  # the run that held it removed the directory in between, ending
            except OSError as e:
                if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                    return self  # a directory this run cannot write in: it can only find there is nothing to do
                raise PrepError(f"cannot create the lock file {self.path}: {e.strerror}")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise PrepError(f"--out {self.out} is in use by another prepare_data.py ({self.holder()}, which holds "
                                f"{self.path}): wait for it to end, or choose another --out")
            # A run removes its lock file as it ends: a lock on a file that is no longer at the path guards nothing.
            try:
                current = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if current:
                self.fd = fd
            else:
                os.close(fd)
        os.ftruncate(self.fd, 0)
        os.write(self.fd, f"{os.getpid()}\n".encode())
        return self

    def holder(self):
        try:
            with open(self.path) as f:
                pid = f.read().strip()
        except OSError:
            pid = ""
        return f"process {pid}" if pid.isdigit() else "a process that has not yet written its PID"

    def __exit__(self, *exception):
        if self.fd is None:
            return
        try:
            os.remove(self.path)
            if self.created:
                os.rmdir(self.out)  # only if the run left it empty
        except OSError:
            pass  # the directory holds shards, or the file is gone: nothing to clean
        os.close(self.fd)
        self.fd = None
