"""checks.py — the ok/FAIL lines of the hardening scripts: check() prints
one per check and keeps the names that failed; done() prints the count and
gives the exit status."""

failures = []


def check(name, ok, detail=""):
    print("%s: %s%s" % ("ok" if ok else "FAIL", name, "" if ok else " -- " + str(detail)), flush=True)
    if not ok:
        failures.append(name)


def done(script):
    print("%s: %d failures" % (script, len(failures)))
    return 1 if failures else 0
