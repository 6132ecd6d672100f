#!/usr/bin/env python3
"""mount_read.py seq|load|use|pread FILE... — one timed pass for bench_mount.sh.

seq:  read the files one after the other with 1 MiB reads (readinto, no
      allocation per read);
load: safetensors.torch.load_file each file (default mmap backend: the
      tensors map the file lazily, so one byte of every 4 KiB page is
      touched to fault it all in), dropped after each file;
use:  load_file, then every tensor copied once (clone), as moving the
      weights to a device reads every byte;
pread: load_file(backend="pread"), which reads every byte eagerly.
Prints "BYTES SECONDS" (interpreter and import time not counted)."""
import os
import sys
import time


def seq(files):
    buf = bytearray(1 << 20)
    mv = memoryview(buf)
    total = 0
    t = time.perf_counter()
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            while True:
                n = os.readv(fd, [mv])
                if n <= 0:
                    break
                total += n
        finally:
            os.close(fd)
    return total, time.perf_counter() - t


def load(files, **kw):
    import torch
    from safetensors.torch import load_file
    total = 0
    t = time.perf_counter()
    for p in files:
        d = load_file(p, **kw)
        for v in d.values():
            b = v.reshape(-1).view(torch.uint8)
            total += int(b[::4096].to(torch.int64).sum() >= 0) and b.numel()
        del d
    return total, time.perf_counter() - t


def use(files):
    import torch
    from safetensors.torch import load_file
    total = 0
    t = time.perf_counter()
    for p in files:
        d = load_file(p)
        for v in d.values():
            c = v.clone()
            total += c.numel() * c.element_size()
            del c
        del d
    return total, time.perf_counter() - t


def pread(files):
    return load(files, backend="pread")


if __name__ == "__main__":
    n, s = {"seq": seq, "load": load, "use": use, "pread": pread}[sys.argv[1]](sys.argv[2:])
    print(n, "%.6f" % s)
