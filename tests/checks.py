"""checks.py: what the Python test drivers share, as tests/shell_helpers.sh does for the shell tests: a PASS or FAIL
line per check, and the count of failures for the exit status."""

failures = 0


def check(ok, message):
    global failures
    failures += not ok
    print(("PASS " if ok else "FAIL ") + message, flush=True)
