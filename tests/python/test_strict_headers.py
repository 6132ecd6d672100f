"""ckptfs pack refuses the safetensors headers the reference reader refuses.

Each bad header is written by hand (a valid two-tensor file with one thing
broken); the real `safetensors.safe_open` must reject it (so the case is
real), and `ckptfs pack` must refuse it: non-zero exit, a message naming the
file and the reason, nothing left at DST.  Headers both accept (whitespace
around the JSON, escaped control characters in a name) must pack and unpack
byte for byte; a name with control characters is printed escaped."""
import os
import struct
import subprocess

import pytest

st = pytest.importorskip("safetensors")
from safetensors import safe_open  # noqa: E402

A = '"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}'
B = '"b":{"dtype":"BF16","shape":[2],"data_offsets":[4,8]}'
OK = "{" + A + "," + B + "}"


def sub_b(s, new):
    return ("{" + A + "," + B.replace('"b"', new) + "}").encode("latin1") if isinstance(s, str) else s


# name: (header bytes, what ckptfs's message must say)
BAD = {
    "bom": (b"\xef\xbb\xbf" + OK.encode(), "byte order mark"),
    "utf8-name": (sub_b(OK, '"b\xff"'), "not UTF-8"),
    "utf8-overlong": (sub_b(OK, '"\xc0\xaf"'), "not UTF-8"),
    "utf8-metadata": (('{"__metadata__":{"format":"p\xe9"},' + A + "," + B + "}").encode("latin1"), "not UTF-8"),
    "duplicate-key": (("{" + A + "," + A.replace("0,4", "4,8") + "}").encode(), "duplicate tensor name"),
    "duplicate-metadata": (('{"__metadata__":{},"__metadata__":{},' + A + "," + B + "}").encode(),
                           "duplicate __metadata__"),
    "repeated-field": (("{" + A.replace('"dtype":"BF16"', '"dtype":"BF16","dtype":"BF16"') + "," + B + "}").encode(),
                       'repeated field "dtype"'),
    "raw-newline-in-name": (sub_b(OK, '"b\n"'), "raw control character"),
    "control-as-whitespace": (("{\x0c" + A + "," + B + "}").encode(), "control character outside a string"),
    "shape-float": (("{" + A.replace("[2]", "[2.0]") + "," + B + "}").encode(), "plain digits (byte 38: 2.0)"),
    "offset-exponent": (("{" + A.replace("0,4", "0,4e0") + "," + B + "}").encode(), "plain digits"),
    "offset-leading-zero": (("{" + A.replace("0,4", "0,04") + "," + B + "}").encode(), "plain digits"),
    "metadata-number": (('{"__metadata__":{"k":1},' + A + "," + B + "}").encode(), '"k" is not a string'),
    "metadata-object": (('{"__metadata__":{"k":{}},' + A + "," + B + "}").encode(), "is not a string"),
    "trailing-nul": ((OK + "\0").encode(), "NUL byte"),
    "unknown-dtype": (("{" + A.replace("BF16", "bf16") + "," + B + "}").encode(), 'unknown dtype "bf16"'),
    "gap": (("{" + A + "," + B.replace("4,8", "6,8").replace("[2]", "[1]") + "}").encode(), "gap"),
}

# Accepted by the reference and by ckptfs.
GOOD = {
    "plain": OK.encode(),
    "leading-space": (" \n" + OK).encode(),
    "trailing-whitespace": (OK + " \t\r\n").encode(),
    "escaped-controls-in-name": sub_b(OK, '"b\\n\\u001b[31m\\u202e"'),
}


def write(path, header):
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + bytes(range(1, 9)))


def run(*args):
    r = subprocess.run([os.environ["CKPTFS"], *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


@pytest.mark.parametrize("name", sorted(BAD))
def test_refused_like_the_reference(workdir, name):
    header, reason = BAD[name]
    d = os.path.join(workdir, "strict-bad", name)
    os.makedirs(d)
    src = os.path.join(d, "m.safetensors")
    write(src, header)
    with pytest.raises(Exception):
        with safe_open(src, "np") as f:
            [f.get_tensor(k) for k in f.keys()]
    dst = os.path.join(d, "packed")
    rc, out, err = run("pack", src, dst)
    assert rc != 0, "ckptfs packed a header the reference rejects: " + out + err
    assert src in err and reason in err, err
    assert not os.path.exists(dst), os.listdir(dst)


@pytest.mark.parametrize("name", sorted(GOOD))
def test_accepted_like_the_reference(workdir, name):
    d = os.path.join(workdir, "strict-good", name)
    os.makedirs(d)
    src = os.path.join(d, "m.safetensors")
    write(src, GOOD[name])
    with safe_open(src, "np") as f:
        names = sorted(f.keys())
    dst, back = os.path.join(d, "packed"), os.path.join(d, "back")
    assert run("pack", src, dst)[0] == 0
    assert run("unpack", dst, back)[0] == 0
    with open(src, "rb") as a, open(os.path.join(back, "m.safetensors"), "rb") as b:
        assert a.read() == b.read()
    assert len(names) == 2


def test_names_printed_escaped(workdir):
    """A tensor name with ANSI escapes and a newline is printed as text."""
    d = os.path.join(workdir, "strict-escaped")
    os.makedirs(d)
    src = os.path.join(d, "m.safetensors")
    write(src, ("{" + A + "," + B.replace('"b"', '"\\u001b[2J\\nb"').replace("BF16", "X") + "}").encode())
    with pytest.raises(Exception):
        safe_open(src, "np")
    rc, out, err = run("pack", src, os.path.join(d, "packed"))
    # the message naming it is one line; then the two lines of what to do
    assert rc != 0 and "\x1b" not in err and err.count("\n") == 3 and "nothing was packed" in err, repr(err)
    assert 'tensor "\\x1b[2J\\nb" has unknown dtype "X"' in err.splitlines()[0], err
