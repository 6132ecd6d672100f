"""bench_windows.py — `ckptfs verify s3://` and `unpack s3://` reading each
packed file chunk by chunk (CKPTFS_S3_WINDOW_MIB=0, the code before) against
in windows (the default, 8 MiB, 2 ahead), in one run against SeaweedFS over
loopback: GET requests (through a counting proxy) and wall time (direct,
best of `runs`), as ratios.  Not a test: prints a table.
Usage: bench_windows.py CKPTFS [files] [runs]
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from s3fixture import SeaweedS3  # noqa: E402
from s3proxy import FaultProxy  # noqa: E402
from test_s3_resume import write_big  # noqa: E402

CKPTFS = os.path.abspath(sys.argv[1])
FILES = int(sys.argv[2]) if len(sys.argv) > 2 else 4
RUNS = int(sys.argv[3]) if len(sys.argv) > 3 else 3


def run(env, *args):
    r = subprocess.run([CKPTFS, *args], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode:
        sys.exit(f"{args}: exit {r.returncode}: {r.stderr[-500:]}")


def main():
    tmp = tempfile.mkdtemp(prefix="ckptfs-bw-")
    try:
        src, packed = os.path.join(tmp, "src"), os.path.join(tmp, "packed")
        for i in range(FILES):
            write_big(os.path.join(src, f"s{i}"), 10 + i)
        subprocess.run([CKPTFS, "pack", src, packed], check=True, capture_output=True)
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _x, fs in os.walk(packed) for f in fs)
        with SeaweedS3() as s3:
            s3.upload_dir(packed, "bw")
            rows = {}
            for mib in ("0", "8"):
                for cmd in ("verify", "unpack"):
                    out = os.path.join(tmp, "out")
                    args = [cmd, s3.url("bw")] + ([out] if cmd == "unpack" else [])
                    gets = {"n": 0}

                    def gate(method, path, headers, gets=gets):
                        gets["n"] += method == "GET" and bool(headers.get("Range"))
                        return False

                    with FaultProxy(s3.port, every=1 << 40, burst=0, gate=gate) as px:
                        run(s3.env(AWS_ENDPOINT_URL=px.endpoint, CKPTFS_S3_WINDOW_MIB=mib), *args)
                    shutil.rmtree(out, ignore_errors=True)
                    best = None
                    for _ in range(RUNS):
                        t0 = time.monotonic()
                        run(s3.env(CKPTFS_S3_WINDOW_MIB=mib), *args)
                        dt = time.monotonic() - t0
                        best = dt if best is None else min(best, dt)
                        shutil.rmtree(out, ignore_errors=True)
                    rows[(mib, cmd)] = (gets["n"], best)
        print(f"{FILES} files, {size} packed bytes, SeaweedFS on loopback, best of {RUNS}")
        print("command  ranged GETs before -> after (ratio)   time before -> after (ratio)")
        for cmd in ("verify", "unpack"):
            (g0, t0), (g1, t1) = rows[("0", cmd)], rows[("8", cmd)]
            print(f"{cmd:8} {g0:6} -> {g1:5} ({g1 / g0:.3f})          {t0:.2f} s -> {t1:.2f} s ({t0 / t1:.2f}x)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
