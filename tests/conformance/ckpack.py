"""ckpack.py — a second writer of ckptfs packs, written from docs/format.md alone.

It shares no code with the project's writer (fs/format/container_write.c): every
byte is laid out here with struct, hashed with the `xxhash` package (XXH3-64,
seed 0) and `hashlib` (SHA-256), and zstd frames come from the `zstandard`
package.  It exists so that tests/conformance can build odd-but-valid packs
(split tensors, shared planes, BF16 stored as zstd, ...) and packs that break
exactly one rule of the spec, with every other checksum right.

A pack is described by Python values (File, Extent); build_file() turns a File
into bytes.  Before hashing, a case may edit the parsed fields (the `edit`
hook: dicts of header / TOC / extent fields); after hashing it may damage the
bytes (the `damage` hook).  So "reject: X" cases break X and nothing else.
"""
import hashlib
import json
import os
import struct

import xxhash
import zstandard

MAGIC = b"\x89CKPTFS\n"
RAW, ZSTD, K15, BSPLIT, ARCHIVE = 0, 1, 2, 3, 4


def xxh3(b):
    return xxhash.xxh3_64_intdigest(bytes(b))


def stored_size(exact):
    """Plane size rule of §5.1: round_up(exact, 8) + 8."""
    return (exact + 7) // 8 * 8 + 8


# ---- BF16 planes (§5) -------------------------------------------------------

def weights_of(data):
    return list(struct.unpack("<%dH" % (len(data) // 2), data))


def pick_codebook(enc, w):
    """The reference choice of §5.2: the 15 most frequent symbols, ties to the smaller."""
    shift = 7 if enc == K15 else 8
    hist = {}
    for x in w:
        hist[x >> shift] = hist.get(x >> shift, 0) + 1
    top = sorted(hist, key=lambda s: (-hist[s], s))[:15]
    return top + [0] * (16 - len(top))


class BitWriter:
    """LSB-first bit stream: stream bit b is bit b%8 of byte b//8 (§1)."""

    def __init__(self):
        self.buf = bytearray()
        self.nbits = 0

    def put(self, value, width):
        for j in range(width):
            if self.nbits % 8 == 0:
                self.buf.append(0)
            if (value >> j) & 1:
                self.buf[self.nbits // 8] |= 1 << (self.nbits % 8)
            self.nbits += 1


def encode_bf16(enc, data, codebook, chunk_size):
    """Planes (codes, low, escapes), n_escapes and the escape-prefix datums."""
    w = weights_of(data)
    k15 = enc == K15
    shift = 7 if k15 else 8
    code_of = {}
    for c in range(15):  # a duplicate entry: the first code wins (any would decode right)
        code_of.setdefault(codebook[c], c)
    codes = bytearray(stored_size((len(w) + 1) // 2))
    low = BitWriter() if k15 else bytearray()
    esc = BitWriter() if k15 else bytearray()
    datums, n_esc = [], 0
    per_chunk = chunk_size // 2
    for i, x in enumerate(w):
        if i % per_chunk == 0:
            datums.append(n_esc)
        sym, lo = x >> shift, x & ((1 << shift) - 1)
        c = code_of.get(sym, 15)
        codes[i // 2] |= c << (4 * (i % 2))
        if c == 15:
            if k15:
                esc.put(sym, 9)
            else:
                esc.append(sym)
            n_esc += 1
        if k15:
            low.put(lo, 7)
        else:
            low.append(lo)
    low = bytes(low.buf) if k15 else bytes(low)
    esc = bytes(esc.buf) if k15 else bytes(esc)
    low += bytes(stored_size(len(low)) - len(low))
    esc += bytes(stored_size(len(esc)) - len(esc))
    return [bytes(codes), low, esc], n_esc, datums


# ---- ARCHIVE (§5.3) ---------------------------------------------------------

def varint(v):
    """§5.3.1's varint: one byte below 0x80, else two."""
    return bytes([v]) if v < 0x80 else bytes([0x80 | (v & 0x7F), v >> 7])


def normalize(counts, total):
    """Frequencies summing to total, non-zero wherever a count is (§5.3.2's writer MUST)."""
    n = sum(counts)
    if n == 0:
        return [total] + [0] * (len(counts) - 1)
    f = [max(1, c * total // n) if c else 0 for c in counts]
    while sum(f) > total:  # take from the largest
        f[f.index(max(f))] -= 1
    f[f.index(max(f))] += total - sum(f)
    return f


class Ans:
    """How to code an ARCHIVE extent: mode 0 RAW or 1 CODED, M mantissa
    bits, K classes of columns (axis 0) or rows (axis 1) of C; cmap: the
    class of each line (default: round robin); uniform: the symbol indexes
    whose mantissa table is written as uniform (kind 0)."""

    def __init__(self, mode=1, m=3, k=1, axis=0, c=0, cmap=None, uniform=()):
        self.mode, self.m, self.k, self.axis, self.c = mode, m, k, axis, c
        self.cmap, self.uniform = cmap, set(uniform)


def encode_archive(data, chunk_size, o):
    """(tables, streams, datums) of an ARCHIVE extent (§5.3), the encoder
    running the decoder's steps backwards."""
    w = weights_of(data)
    n = len(w)
    per_chunk = chunk_size // 2
    if o.mode == 0:
        streams = [data[i:i + chunk_size] for i in range(0, len(data), chunk_size)]
        return bytes(12), streams
    m, k = o.m, o.k
    lines = 0 if k == 1 else (o.c if o.axis == 0 else n // o.c)
    cmap = o.cmap or [l % k for l in range(lines)]

    def cls(i):
        return 0 if k == 1 else cmap[i % o.c if o.axis == 0 else i // o.c]
    v = sorted({x >> 7 for x in w})
    idx = {s: a for a, s in enumerate(v)}
    ce = [[0] * len(v) for _ in range(k)]
    cm = [[0] * (1 << m) for _ in v]
    for i, x in enumerate(w):
        ce[cls(i)][idx[x >> 7]] += 1
        cm[idx[x >> 7]][(x & 0x7F) >> (7 - m)] += 1
    fe = [normalize(c, 4096) for c in ce]
    fm = [[256 >> m] * (1 << m) if a in o.uniform else normalize(c, 256) for a, c in enumerate(cm)]
    tab = bytearray(struct.pack("<BBBBIHH", 1, m, k, o.axis, o.c if k > 1 else 0, len(v), 0))
    tab += struct.pack("<%dH" % len(v), *v)
    if k > 1:
        width = 1 if k <= 2 else 2 if k <= 4 else 3 if k <= 8 else 4
        bw = BitWriter()
        for c in cmap:
            bw.put(c, width)
        tab += bw.buf
    for f in fe:
        tab += b"".join(varint(x) for x in f)
    for a in range(len(v) if m else 0):
        tab += b"\0" if a in o.uniform else b"\1" + b"".join(varint(x) for x in fm[a])
    streams = []
    for c0 in range(0, n, per_chunk):
        cw = w[c0:c0 + per_chunk]
        x, words = [1 << 15] * 16, []

        def put(l, f, cum, bits_):
            if x[l] >= ((1 << 15 >> bits_) << 16) * f:
                words.append(x[l] & 0xFFFF)
                x[l] >>= 16
            x[l] = (x[l] // f << bits_) + x[l] % f + cum
        for g in reversed(range(0, len(cw), 16)):
            r = min(16, len(cw) - g)
            for l in reversed(range(r)):
                a, h = idx[cw[g + l] >> 7], (cw[g + l] & 0x7F) >> (7 - m)
                if m:
                    put(l, fm[a][h], sum(fm[a][:h]), 8)
            for l in reversed(range(r)):
                a, f = idx[cw[g + l] >> 7], fe[cls(c0 + g + l)]
                put(l, f[a], sum(f[:a]), 12)
        low = BitWriter()
        for x_ in cw:
            low.put(x_ & ((1 << (7 - m)) - 1), 7 - m)
        streams.append(struct.pack("<16I", *x) + bytes(low.buf) +
                       b"".join(struct.pack("<H", y) for y in reversed(words)))
    return bytes(tab), streams


# ---- extents and files ------------------------------------------------------

class Extent:
    """One extent of original bytes `data`, encoded as `enc`.

    chunk_size defaults to the writer's conventions; codebook (BF16) to the
    reference choice; frames (ZSTD) to one zstd frame per chunk made by
    `frame(chunk_bytes) -> bytes` (default: level 3 with content size).
    share: index of an earlier extent whose plane and index bytes this one
    reuses (its data must be equal)."""

    def __init__(self, enc, data, chunk_size=None, codebook=None, frame=None, name=b"",
                 dtype=0, share=None, ans=None):
        self.enc, self.data, self.name, self.dtype, self.share = enc, bytes(data), name, dtype, share
        self.chunk_size = chunk_size or (131072 if enc in (K15, BSPLIT, ARCHIVE) else 262144)
        self.ans = ans or Ans()
        self.codebook = codebook
        self.frame = frame or (lambda b: zstandard.ZstdCompressor(level=3).compress(b))

    def chunks(self):
        cs = self.chunk_size
        return [self.data[i:i + cs] for i in range(0, len(self.data), cs)]

    def payload(self):
        """(planes, record fields, index entries) before placement."""
        f = {"encoding": self.enc, "chunk_size": self.chunk_size, "n_escapes": 0,
             "codebook": [0] * 16, "dtype": self.dtype}
        hashes = [xxh3(c) for c in self.chunks()]
        if self.enc == RAW:
            return [self.data], f, [(0, h) for h in hashes]
        if self.enc == ZSTD:
            frames = [self.frame(c) for c in self.chunks()]
            datums = [sum(len(x) for x in frames[:i]) for i in range(len(frames))]
            return [b"".join(frames)], f, list(zip(datums, hashes))
        if self.enc == ARCHIVE:
            tab, streams = encode_archive(self.data, self.chunk_size, self.ans)
            datums = [sum(len(x) for x in streams[:i]) for i in range(len(streams))]
            return [tab, b"".join(streams)], f, list(zip(datums, hashes))
        cb = self.codebook or pick_codebook(self.enc, weights_of(self.data))
        planes, n_esc, datums = encode_bf16(self.enc, self.data, cb, self.chunk_size)
        f.update(n_escapes=n_esc, codebook=list(cb))
        return planes, f, list(zip(datums, hashes))


class File:
    """One packed file: the original bytes are the concatenation of its extents."""

    def __init__(self, path, extents, kind=0, mode=0o644, mtime_ns=1700000000123456789,
                 align=8, gap_fill=b"\0", edit=None, damage=None, reverse=False):
        self.path = path if isinstance(path, bytes) else path.encode()
        self.extents, self.kind, self.mode, self.mtime_ns = extents, kind, mode, mtime_ns
        self.align, self.gap_fill, self.edit, self.damage, self.reverse = align, gap_fill, edit, damage, reverse

    def original(self):
        return b"".join(x.data for x in self.extents)


def _pad(out, align, fill):
    while len(out) % align:
        out += fill[:1] if len(out) >= 64 else b"\0"


def build_file(f):
    """Lay out, hash and serialize one packed file (§3)."""
    orig = f.original()
    out = bytearray(64)
    recs, strtab, placed = [], bytearray(f.path), []
    name_at = {}
    order = list(range(len(f.extents)))
    if f.reverse:  # payloads in the reverse of extent order: legal (§3)
        order.reverse()
    laid = {}
    for i in order:
        x = f.extents[i]
        if x.share is not None:
            continue
        planes, fields, index = x.payload()
        offs = []
        for p in planes:
            _pad(out, f.align, f.gap_fill)
            offs.append((len(out), len(p)))
            out += p
        _pad(out, f.align, f.gap_fill)
        ix = b"".join(struct.pack("<QQ", d, h) for d, h in index)
        laid[i] = (offs, fields, len(out), ix)
        out += ix
    pos = 0
    for i, x in enumerate(f.extents):
        offs, fields, ix_off, ix = laid[x.share if x.share is not None else i]
        fields = dict(fields)
        if x.share is not None:
            fields["dtype"] = x.dtype
        if x.name:
            if x.name not in name_at:
                name_at[x.name] = len(strtab)
                strtab += x.name
            noff, nlen = name_at[x.name], len(x.name)
        else:
            noff, nlen = 0, 0
        planes = offs + [(0, 0)] * (3 - len(offs))
        fields.update(orig_offset=pos, orig_size=len(x.data),
                      n_chunks=len(ix) // 16, index_offset=ix_off, index_hash=xxh3(ix),
                      planes=planes, name_off=noff, name_len=nlen, reserved=bytes(44))
        recs.append(fields)
        pos += len(x.data)
    _pad(out, 8, f.gap_fill)
    toc = {"magic": b"TOC1", "n_extents": len(recs), "original_size": len(orig),
           "sha256": hashlib.sha256(orig).digest(), "kind": f.kind, "mode": f.mode,
           "mtime_ns": f.mtime_ns, "path_len": len(f.path), "strtab_size": len(strtab),
           "reserved": bytes(24), "strtab": bytes(strtab)}
    minor = 1 if any(x.enc == ARCHIVE for x in f.extents) else 0  # the lowest that holds it (§10)
    hdr = {"magic": MAGIC, "major": 1, "minor": minor, "flags": 0, "original_size": len(orig),
           "toc_offset": len(out)}
    ctx = {"hdr": hdr, "toc": toc, "recs": recs, "body": out}
    if f.edit:
        f.edit(ctx)
    tb = serialize_toc(ctx["toc"], ctx["recs"])
    hdr.setdefault("toc_size", len(tb))
    hdr.setdefault("toc_hash", xxh3(tb))
    hdr.setdefault("file_size", hdr["toc_offset"] + len(tb))
    h = struct.pack("<8sHHIQQQQQ", hdr["magic"], hdr["major"], hdr["minor"], hdr["flags"],
                    hdr["original_size"], hdr["toc_offset"], hdr["toc_size"], hdr["toc_hash"],
                    hdr["file_size"])
    h += struct.pack("<Q", hdr.get("header_hash", xxh3(h)))
    body = ctx["body"]
    body[0:64] = h
    body = bytes(body[:hdr["toc_offset"]]) + bytes(max(0, hdr["toc_offset"] - len(body))) + tb
    if f.damage:
        body = f.damage(bytearray(body), ctx)
    return bytes(body)


def serialize_toc(t, recs):
    b = struct.pack("<4sIQ32sIIqII24s", t["magic"], t["n_extents"], t["original_size"], t["sha256"],
                    t["kind"], t["mode"], t["mtime_ns"], t["path_len"], t["strtab_size"], t["reserved"])
    for r in recs:
        (p0, s0), (p1, s1), (p2, s2) = r["planes"]
        b += struct.pack("<QQIIQQQQQQQQQQ16HIII44s", r["orig_offset"], r["orig_size"], r["encoding"],
                         r["chunk_size"], r["n_chunks"], r["index_offset"], r["index_hash"],
                         p0, s0, p1, s1, p2, s2, r["n_escapes"], *r["codebook"],
                         r["name_off"], r["name_len"], r["dtype"], r["reserved"])
    return b + t["strtab"]


# ---- a packed directory (§2, §7) --------------------------------------------

def manifest_bytes(files, dirs, edit=None, damage=None, links=()):
    """files: [File]; dirs: [(path, mode)]; links: [(path, target)] (§7: format 2
    when there are any)."""
    doc = {"format": 2 if links else 1,
           "files": [{"path": f.path.decode("utf-8", "surrogateescape"), "size": len(f.original()),
                      "sha256": hashlib.sha256(f.original()).hexdigest(), "mode": f.mode & 0o7777,
                      "mtime_ns": str(f.mtime_ns), "kind": "safetensors" if f.kind else "blob"}
                     for f in files],
           "dirs": [{"path": p, "mode": m} for p, m in dirs]}
    doc["files"].sort(key=lambda e: e["path"].encode("utf-8", "surrogateescape"))
    doc["dirs"].sort(key=lambda e: e["path"].encode())
    if links:
        doc["links"] = sorted(({"path": p, "target": t} for p, t in links), key=lambda e: e["path"].encode())
    if edit:
        doc = edit(doc)
    js = doc if isinstance(doc, bytes) else json.dumps(doc, indent=1).encode()
    text = b"CKPTFS-MANIFEST 1 %016x\n" % xxh3(js) + js
    return damage(text) if damage else text


def write_pack(dst, files, dirs=(), manifest_edit=None, manifest_damage=None, extra=None, links=()):
    """Write DST/<path>.ckpt for every File and DST/ckptfs.manifest (links: in it only)."""
    os.makedirs(dst)
    for p, _ in dirs:
        os.makedirs(os.path.join(dst, p), exist_ok=True)
    for f in files:
        with open(os.path.join(dst.encode(), f.path + b".ckpt"), "wb") as o:
            o.write(build_file(f))
    for name, data in (extra or {}).items():
        with open(os.path.join(dst, name), "wb") as o:
            o.write(data)
    with open(os.path.join(dst, "ckptfs.manifest"), "wb") as o:
        o.write(manifest_bytes(files, list(dirs), manifest_edit, manifest_damage, list(links)))
