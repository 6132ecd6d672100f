#!/usr/bin/env python3
"""Side-by-side comparison on real trained weights: ckptfs vs its peers.

For each model of the corpus (tests/corpus/make_corpus.py) prints one markdown
table with, per method, the bits per BF16 weight and the space saved with every
byte charged, and pack / decode throughput:

  ckptfs archive, K15, byte-split
                                 `ckptfs pack --jobs 1`, `unpack`; b/w from
                                 `ckptfs stat --json` (bf16_bits_per_weight)
  ZipNN (zipnn, PyPI)            ZipNN(bytearray_dtype="bfloat16", threads=1)
                                 .compress/.decompress per file
  lmz (lmzip, PyPI)              `lmz compress -j 1`, `lmz decompress -j 1`
  zstd -19                       the zstd CLI, one file at a time, -T1
  order-0 bounds                 H(sign,exponent) + 7 and 16-bit joint entropy,
                                 per tensor, weighted (numpy)
  memcpy                         numpy copy of a 256 MiB array: the ceiling

Columns:
  b/w shards   8 x compressed bytes of the *.safetensors files (headers,
               non-BF16 tensors, padding, indexes all charged) / BF16 weights.
               ckptfs: the .ckpt files of the shards; lmz: an archive of the
               shards alone.  Bounds: the bound itself.
  b/w tensors  ckptfs only: stat's bf16_bits_per_weight (BF16 tensor data).
  dir %        whole packed model dir (every file incl. manifest, tokenizer,
               config) / original dir bytes; `saved` = 100 % - dir %.
  pack, decode MB/s of original bytes, wall time, best of --runs, files in
               the page cache; single thread for every tool (ckptfs --jobs 1,
               lmz -j 1, zstd -T1, ZipNN threads=1).  Every tool reads and
               writes files (ckptfs, lmz, zstd also start a process per run;
               ckptfs hashes and checks what it writes); ZipNN's codec alone
               (in memory) is given under the table.

Writes to --out: compare.md (the tables), compare.json, bpw.png (bits per
weight per method per model) and hist-<model>.png (sign+exponent histograms of
a few attention, MLP, embedding and norm tensors).

usage: compare.py --ckptfs PATH [--corpus DIR] [--out DIR] [--runs N]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "corpus"))
import bf16stats  # noqa: E402

MB = 1e6


# ---------------------------------------------------------------- helpers

def sh(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} -> {r.returncode}: {r.stderr.decode(errors='replace')[-1500:]}")
    return r.stdout.decode(errors="replace")


def best_time(fn, runs, setup=None):
    """Best wall time of fn() over runs (setup() untimed before each)."""
    best = float("inf")
    for _ in range(runs):
        if setup:
            setup()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def rm(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def files_under(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        out += [os.path.relpath(os.path.join(d, f), root) for f in sorted(files)]
    return out


def same_tree(a, b):
    fa, fb = files_under(a), files_under(b)
    if fa != fb:
        return False
    for rel in fa:
        with open(os.path.join(a, rel), "rb") as x, open(os.path.join(b, rel), "rb") as y:
            if x.read() != y.read():
                return False
    return True


def memcpy_bandwidth(nbytes=256 << 20, runs=5):
    src = np.ones(nbytes, np.uint8)
    dst = np.empty_like(src)
    t = best_time(lambda: np.copyto(dst, src), runs)
    return nbytes / t / MB


# ---------------------------------------------------------------- methods

def run_ckptfs(ckptfs, src, fmt, work, runs, shards):
    dst, out = os.path.join(work, f"ck-{fmt}"), os.path.join(work, f"ck-{fmt}-out")
    t_pack = best_time(lambda: sh([ckptfs, "pack", "--format", fmt, "--jobs", "1", src, dst]),
                       runs, setup=lambda: rm(dst))
    t_dec = best_time(lambda: sh([ckptfs, "unpack", dst, out]), runs, setup=lambda: rm(out))
    ok = same_tree(src, out)
    st = json.loads(sh([ckptfs, "stat", "--json", dst]))
    shard_bytes = sum(os.path.getsize(os.path.join(dst, s + ".ckpt")) for s in shards)
    res = {"dir_bytes": bf16stats.dir_bytes(dst), "shard_bytes": shard_bytes,
           "bpw_tensors": float(st["bf16_bits_per_weight"]),
           "escape_rate": st.get("escape_rate"), "t_pack": t_pack, "t_dec": t_dec,
           "exact": ok, "stat": st}
    rm(dst)
    rm(out)
    return res


def run_zipnn(src, files, shards, work, runs):
    """Timed like the CLIs: read the file, (de)compress, write the result.
    The codec alone (in memory) is timed too and kept as *_mem."""
    import zipnn
    z = zipnn.ZipNN(bytearray_dtype="bfloat16", threads=1)
    dir_bytes = shard_bytes = 0
    t_pack = t_dec = t_pack_mem = t_dec_mem = 0.0
    ok = True
    zpath, opath = os.path.join(work, "f.znn"), os.path.join(work, "f.out")

    def compress_file(inp):
        with open(inp, "rb") as f:
            buf = bytearray(f.read())
        # ZipNN reorders the bytes of its input in place (even of a bytes
        # object): it gets a buffer of its own.
        c = z.compress(buf)
        with open(zpath, "wb") as f:
            f.write(c)

    def decompress_file():
        with open(zpath, "rb") as f:
            d = z.decompress(f.read())
        with open(opath, "wb") as f:
            f.write(d)

    for rel in files:
        inp = os.path.join(src, rel)
        with open(inp, "rb") as f:
            orig = f.read()
        t_pack += best_time(lambda: compress_file(inp), runs)
        t_dec += best_time(decompress_file, runs)
        with open(opath, "rb") as f:
            ok &= f.read() == orig
        holder = {}
        t_pack_mem += best_time(lambda: holder.__setitem__("c", z.compress(holder["buf"])), runs,
                                setup=lambda: holder.__setitem__("buf", bytearray(orig)))
        comp = holder["c"]
        t_dec_mem += best_time(lambda: z.decompress(comp), runs)
        dir_bytes += len(comp)
        if rel in shards:
            shard_bytes += len(comp)
        rm(zpath)
        rm(opath)
    return {"dir_bytes": dir_bytes, "shard_bytes": shard_bytes, "t_pack": t_pack,
            "t_dec": t_dec, "t_pack_mem": t_pack_mem, "t_dec_mem": t_dec_mem, "exact": ok}


def run_lmz(lmz, src, shards, work, runs):
    only = os.path.join(work, "lmz-shards")
    os.makedirs(only)
    for s in shards:
        os.link(os.path.join(src, s), os.path.join(only, os.path.basename(s)))
    arch, out = os.path.join(work, "m.lmz"), os.path.join(work, "lmz-out")
    sh([lmz, "compress", "-j", "1", "-q", "-f", src, arch])
    dir_bytes = os.path.getsize(arch)
    sh([lmz, "decompress", "-j", "1", "-q", "-f", arch, out])
    ok = same_tree(src, out)
    rm(out)
    rm(arch)
    t_pack = best_time(lambda: sh([lmz, "compress", "-j", "1", "-q", "-f", only, arch]), runs,
                       setup=lambda: rm(arch))
    shard_bytes = os.path.getsize(arch)
    t_dec = best_time(lambda: sh([lmz, "decompress", "-j", "1", "-q", "-f", arch, out]), runs,
                      setup=lambda: rm(out))
    ok &= same_tree(only, out)
    rm(out)
    rm(arch)
    rm(only)
    return {"dir_bytes": dir_bytes, "shard_bytes": shard_bytes, "t_pack": t_pack,
            "t_dec": t_dec, "exact": ok, "throughput_on": "shards"}


def run_zstd(src, files, shards, work, runs, level=19):
    dir_bytes = shard_bytes = 0
    t_pack = t_dec = 0.0
    ok = True
    for rel in files:
        inp = os.path.join(src, rel)
        z, back = os.path.join(work, "f.zst"), os.path.join(work, "f.out")
        t_pack += best_time(lambda: sh(["zstd", f"-{level}", "-T1", "-q", "-f", inp, "-o", z]), runs)
        t_dec += best_time(lambda: sh(["zstd", "-d", "-T1", "-q", "-f", z, "-o", back]), runs)
        size = os.path.getsize(z)
        with open(inp, "rb") as a, open(back, "rb") as b:
            ok &= a.read() == b.read()
        dir_bytes += size
        if rel in shards:
            shard_bytes += size
        rm(z)
        rm(back)
    return {"dir_bytes": dir_bytes, "shard_bytes": shard_bytes, "t_pack": t_pack,
            "t_dec": t_dec, "exact": ok}


# ---------------------------------------------------------------- plots

def plot_bpw(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = list(results)
    methods = [m for m in results[models[0]]["rows"]]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(models)
    for i, model in enumerate(models):
        ys = [results[model]["rows"][m]["bpw"] for m in methods]
        xs = np.arange(len(methods)) + i * width
        bars = ax.bar(xs, ys, width, label=model)
        for x, y in zip(xs, ys):
            ax.text(x, y + 0.1, f"{y:.2f}", ha="center", va="bottom", fontsize=7, rotation=90)
        del bars
    ax.axhline(16, color="grey", lw=0.8, ls="--")
    ax.set_xticks(np.arange(len(methods)) + width * (len(models) - 1) / 2)
    ax.set_xticklabels(methods, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("bits per BF16 weight (all bytes charged)")
    ax.set_ylim(9, 17.5)
    ax.set_title("Bits per weight by method (BF16 = 16)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def pick_tensors(model_dir, per_kind=3):
    """A few tensors of each kind, largest first."""
    by_kind = {}
    for path, name, w in bf16stats.iter_bf16(model_dir):
        by_kind.setdefault(bf16stats.kind_of(name), []).append((w.size, name, w))
    chosen = {}
    for kind in ("attention", "mlp", "embedding", "norm"):
        items = sorted(by_kind.get(kind, []), key=lambda t: (-t[0], t[1]))
        chosen[kind] = [(name, w) for _, name, w in items[:per_kind]]
    return chosen


def plot_hist(model, model_dir, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    chosen = pick_tensors(model_dir)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for ax, (kind, items) in zip(axes.ravel(), chosen.items()):
        for name, w in items:
            c = np.bincount(w >> 7, minlength=512).astype(float) / w.size
            top15 = set(np.argsort(-c, kind="stable")[:15])
            esc = 1 - sum(c[s] for s in top15)
            exps = np.arange(256)
            short = name.replace("encoder.layer.", "L").replace(".weight", "").replace(".bias", ".b")
            line, = ax.semilogy(exps, np.where(c[:256] > 0, c[:256], np.nan), "-",
                                lw=1, label=f"{short} +  (esc {esc:.1%})")
            ax.semilogy(exps, np.where(c[256:] > 0, c[256:], np.nan), "--", lw=1,
                        color=line.get_color(), label=f"{short} -")
        ax.set_title(f"{kind}")
        ax.set_xlim(95, 135)
        ax.set_xlabel("biased exponent (solid: sign +, dashed: sign -)")
        ax.set_ylabel("fraction of weights")
        ax.legend(fontsize=6)
    fig.suptitle(f"{model}: sign+exponent (w >> 7) histograms; escapes = outside the 15 most frequent")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- report

def fmt_rate(nbytes, t):
    return f"{nbytes / t / MB:,.0f}" if t and t > 0 else "-"


def model_table(model, res):
    lines = [f"### {model} ({res['bf16_weights'] / 1e6:.2f} M BF16 weights, "
             f"{res['orig_dir_bytes'] / MB:.1f} MB dir, {res['orig_shard_bytes'] / MB:.1f} MB shards)", "",
             "| method | b/w shards | b/w tensors | escapes | dir % | saved | pack MB/s | decode MB/s | exact |",
             "|---|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for name, r in res["rows"].items():
        if r.get("bound"):
            lines.append(f"| {name} | {r['bpw']:.3f} | | | | {100 - r['bpw'] / 16 * 100:.1f} % | | | |")
            continue
        dir_pct = r["dir_bytes"] / res["orig_dir_bytes"] * 100
        base = res["orig_shard_bytes"] if r.get("throughput_on") == "shards" else res["orig_dir_bytes"]
        esc = f"{r['escape_rate'] * 100:.2f} %" if r.get("escape_rate") is not None else ""
        tens = f"{r['bpw_tensors']:.3f}" if "bpw_tensors" in r else ""
        lines.append(f"| {name} | {r['bpw']:.3f} | {tens} | {esc} | {dir_pct:.2f} % | {100 - dir_pct:.2f} % | "
                     f"{fmt_rate(base, r['t_pack'])} | {fmt_rate(base, r['t_dec'])} | "
                     f"{'yes' if r['exact'] else 'NO'} |")
    zn = res["rows"].get("ZipNN")
    if zn and zn.get("t_pack_mem"):
        lines += ["", f"ZipNN codec alone, in memory: pack {fmt_rate(res['orig_dir_bytes'], zn['t_pack_mem'])} MB/s, "
                  f"decode {fmt_rate(res['orig_dir_bytes'], zn['t_dec_mem'])} MB/s."]
    lines.append("")
    return "\n".join(lines)


def compare_model(args, model, src, work):
    files = files_under(src)
    shards = [f for f in files if f.endswith(".safetensors")]
    st = bf16stats.model_stats(src)
    n = st["bf16_weights"]
    res = {"bf16_weights": n, "orig_dir_bytes": bf16stats.dir_bytes(src),
           "orig_shard_bytes": sum(os.path.getsize(os.path.join(src, s)) for s in shards),
           "accounted": {k: v for k, v in st.items() if k != "tensors"}, "rows": {}}
    rows = res["rows"]
    tag = "" if os.path.basename(args.ckptfs) == "ckptfs" else " (ref)"
    for fmt, label in (("archive", "ckptfs archive"), ("k15", "ckptfs K15"), ("bytesplit", "ckptfs byte-split")):
        r = run_ckptfs(args.ckptfs, src, fmt, work, args.runs, shards)
        r["bpw"] = 8 * r["shard_bytes"] / n
        rows[label + tag] = r
        print(f"  {label}: {r['bpw']:.3f} b/w", file=sys.stderr, flush=True)
    if not args.skip_peers:
        for label, fn in (("ZipNN", lambda: run_zipnn(src, files, shards, work, args.runs)),
                          ("lmz", lambda: run_lmz(args.lmz, src, shards, work, args.runs)),
                          ("zstd -19", lambda: run_zstd(src, files, shards, work, args.zstd_runs))):
            try:
                r = fn()
                r["bpw"] = 8 * r["shard_bytes"] / n
                rows[label] = r
                print(f"  {label}: {r['bpw']:.3f} b/w", file=sys.stderr, flush=True)
            except Exception as e:  # a peer missing must not hide the rest
                print(f"  {label}: not run: {e}", file=sys.stderr, flush=True)
    rows["H(sign,exp)+7 bound"] = {"bpw": st["h_se7_bpw"], "bound": True}
    rows["H16 joint bound"] = {"bpw": st["h16_bpw"], "bound": True}
    return res


def main():
    ap = argparse.ArgumentParser(description="ckptfs vs peers on real weights")
    ap.add_argument("--ckptfs", required=True, help="path to the ckptfs binary")
    ap.add_argument("--corpus", default=os.environ.get("CKPTFS_CORPUS", "corpus"))
    ap.add_argument("--out", default="compare-out")
    ap.add_argument("--runs", type=int, default=3, help="timing runs, best kept")
    ap.add_argument("--zstd-runs", type=int, default=1, help="timing runs for zstd -19 (slow)")
    ap.add_argument("--lmz", default=shutil.which("lmz") or "lmz")
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args()
    args.ckptfs = os.path.abspath(args.ckptfs)
    corpus = os.path.abspath(args.corpus)
    r = subprocess.run([sys.executable, os.path.join(HERE, "..", "corpus", "make_corpus.py"), corpus])
    if r.returncode != 0:
        sys.exit(f"make_corpus.py -> {r.returncode}")
    with open(os.path.join(corpus, "corpus.json")) as f:
        models = [m["name"] for m in json.load(f)["models"]]
    os.makedirs(args.out, exist_ok=True)
    memcpy = memcpy_bandwidth()
    results = {}
    for model in models:
        print(f"{model}:", file=sys.stderr, flush=True)
        work = tempfile.mkdtemp(prefix="ckptfs-compare-")
        try:
            results[model] = compare_model(args, model, os.path.join(corpus, model), work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    md = ["## Real trained weights: ckptfs and its peers", "",
          f"memcpy (numpy copy of 256 MiB): {memcpy:,.0f} MB/s, the ceiling for any decode. "
          "All tools single-threaded; MB/s of original bytes, file to file in the page cache "
          "(lmz timed on the shards alone). b/w shards: every byte of the *.safetensors files "
          "charged; dir %: the whole packed dir (manifest, tokenizer, config) over the original.", ""]
    md += [model_table(m, res) for m, res in results.items()]
    text = "\n".join(md)
    print(text)
    with open(os.path.join(args.out, "compare.md"), "w") as f:
        f.write(text + "\n")
    slim = {m: {**{k: v for k, v in res.items() if k != "rows"},
                "rows": {k: {kk: vv for kk, vv in r.items() if kk != "stat"} for k, r in res["rows"].items()}}
            for m, res in results.items()}
    with open(os.path.join(args.out, "compare.json"), "w") as f:
        json.dump({"memcpy_MBps": memcpy, "models": slim}, f, indent=2)
    if not args.no_plots:
        plot_bpw(results, os.path.join(args.out, "bpw.png"))
        for model in models:
            plot_hist(model, os.path.join(corpus, model), os.path.join(args.out, f"hist-{model}.png"))
    bad = [(m, k) for m, res in results.items() for k, r in res["rows"].items()
           if not r.get("bound") and not r["exact"]]
    if bad:
        print(f"NOT EXACT: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
