"""mount_checks.py — checks the damage tests of the mount share (imported by
the Python the integration scripts run; lib.sh puts tests/lib on PYTHONPATH)."""
import errno
import os


def whole_read_is_eio(path, what):
    """A read of the whole file must fail with EIO, never return bytes (its
    open may fail with EIO already: a packed file changed while mounted)."""
    try:
        with open(path, "rb") as f:
            f.read()
    except OSError as e:
        assert e.errno == errno.EIO, e
        return
    raise AssertionError("whole-file read of the %s succeeded" % what)


def others_read_exactly(src, mnt, skip):
    """Every other top-level file under mnt reads back equal to src's."""
    for rel in sorted(os.listdir(src)):
        p = os.path.join(src, rel)
        if rel != skip and os.path.isfile(p):
            with open(p, "rb") as x, open(os.path.join(mnt, rel), "rb") as y:
                assert x.read() == y.read(), rel
