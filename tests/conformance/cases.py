"""cases.py — the conformance cases of docs/format.md, each with its verdict.

Every case is a small packed directory built by ckpack.py (independent of the
project's writer) and the verdict a conforming reader must reach:
  accept: every listed file reads back as exactly its original bytes;
  reject: the pack (or the named file) is refused; `expect` is a piece of the
          message ckptfs gives (ckptfs's wording, not the spec's); `damaged`
          (original byte range of the damaged chunk) for damage that only
          costs that chunk: through the mount the other 4 KiB pages read back.
`rule` names the spec rule (§ and the MUST) that the case exercises; the
spec's §8 table lists the same rule ids.
"""
import json
import random
import struct

import zstandard

from ckpack import ARCHIVE, BSPLIT, K15, RAW, ZSTD, Ans, Extent, File, xxh3


def bf16(n, seed=1, spread=0.02):
    """n BF16 weights of a N(0, spread) tensor, rounded by truncation (little-endian)."""
    rnd = random.Random(seed)
    out = bytearray()
    for _ in range(n):
        f = struct.unpack("<I", struct.pack("<f", rnd.gauss(0, spread)))[0]
        out += struct.pack("<H", f >> 16)
    return bytes(out)


def text(n, seed=2):
    rnd = random.Random(seed)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"\n", b"{\"k\": 1}"]
    out = bytearray()
    while len(out) < n:
        out += rnd.choice(words) + b" "
    return bytes(out[:n])


def noise(n, seed=3):
    rnd = random.Random(seed)
    return bytes(rnd.getrandbits(8) for _ in range(n))


W = bf16(3000)                 # 6000 bytes: 12 chunks of 512 bytes
W2 = bf16(1001, seed=7)        # odd weight count: a high nibble of padding
T = text(5000)
CS = 512                       # small chunks so that every extent has several


def st_file(path="model.safetensors", **kw):
    """A safetensors-like file: header extent, K15, BSPLIT and raw F32 tensors."""
    hdr = b'\x20\x00\x00\x00\x00\x00\x00\x00{"__metadata__":{"a":"b"}}      '
    return File(path, [Extent(ZSTD, hdr * 4, chunk_size=64),
                       Extent(K15, W, chunk_size=CS, name=b"w.k15", dtype=7),
                       Extent(BSPLIT, W2, chunk_size=CS, name=b"w.bs", dtype=7),
                       Extent(RAW, noise(300), chunk_size=128, name=b"b.f32", dtype=10)],
                kind=1, **kw)


def st_bytes(tensors):
    """A valid safetensors file (its 8-byte length, JSON header, data) of
    [(name, dtype, shape, bytes)], tensors in that order; and each tensor's
    (begin, end) in the file."""
    meta, off = {}, 0
    for name, dt, shape, b in tensors:
        meta[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
    head = json.dumps(meta, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    start = 8 + len(head)
    spans = [(start + m["data_offsets"][0], start + m["data_offsets"][1]) for m in meta.values()]
    return struct.pack("<Q", len(head)) + head + b"".join(t[3] for t in tensors), spans


# Tensors of the safetensors cases that loaders read (libckread, §4): a BF16
# matrix, an F32 vector, a BF16 tensor of one row.
ST_TENSORS = [("w.k15", "BF16", (24, 125), W), ("b.f32", "F32", (75,), noise(300)),
              ("w.row", "BF16", (1, 1001), W2)]


def st_tiled(path, cut):
    """A safetensors file of ST_TENSORS whose extents end at the offsets
    cut(spans, size) returns (each extent RAW, K15 or ZSTD by turns), named
    x0, x1...: no extent is named for the tensor it holds."""
    data, spans = st_bytes(ST_TENSORS)
    bounds = sorted(set([0, len(data)] + cut(spans, len(data))))
    ext = []
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        enc = K15 if (b - a) % 2 == 0 and a % 2 == 0 and i % 3 == 1 else (ZSTD if i % 3 == 2 else RAW)
        ext.append(Extent(enc, data[a:b], chunk_size=CS, name=b"x%d" % i, dtype=7 if enc == K15 else 0))
    return File(path, ext, kind=1)


def blob(path="config.json", **kw):
    return File(path, [Extent(ZSTD, T, chunk_size=1000)], **kw)


def edit_rec(i, **fields):
    def f(ctx):
        for k, v in fields.items():
            if k.startswith("plane"):
                p, what = int(k[5]), k[7:]
                off, size = ctx["recs"][i]["planes"][p]
                ctx["recs"][i]["planes"][p] = (v if what == "offset" else off, v if what == "size" else size)
            else:
                ctx["recs"][i][k] = v
    return f


def edit(part, **fields):
    def f(ctx):
        ctx[part].update(fields)
    return f


def put(off_of, data):
    """Damage hook: overwrite bytes at off_of(ctx, body)."""
    def f(body, ctx):
        o = off_of(ctx, body)
        body[o:o + len(data)] = data
        return body
    return f


def flip_plane(i, p, at=0):
    def f(body, ctx):
        body[ctx["recs"][i]["planes"][p][0] + at] ^= 0x10
        return body
    return f


def zframe(b, **kw):
    return zstandard.ZstdCompressor(level=3, **kw).compress(b)


def skippable(b):
    return struct.pack("<II", 0x184D2A50, 4) + b"skip" + zframe(b)


def two_frames(b):
    h = len(b) // 2
    return zframe(b[:h]) + zframe(b[h:])


def trailing(b):
    return zframe(b) + b"\0\0\0\0"


def big_window(b):
    # a frame that declares a 32 MiB window (no content size: window from the header)
    p = zstandard.ZstdCompressionParameters(window_log=25, write_content_size=False)
    o = zstandard.ZstdCompressor(compression_params=p).compressobj()  # size unknown: the window stays
    f = o.compress(b) + o.flush()
    assert zstandard.get_frame_parameters(f).window_size == 1 << 25
    return f


def zstd_bound(n):
    """The longest frame a chunk of n bytes may have (format §6.1, zstd's ZSTD_COMPRESSBOUND)."""
    return n + (n >> 8) + (((128 << 10) - n) >> 11 if n < 128 << 10 else 0)


def raw_block_frame(extra_empty):
    """A frame of one raw block holding the chunk, after extra_empty empty raw
    blocks (3 bytes each): valid zstd (RFC 8878 §3.1.1.2) of any length."""
    def f(b):
        hdr = b"\x28\xb5\x2f\xfd\x00\x38"           # magic; no content size; window 128 KiB
        blocks = struct.pack("<I", 0)[:3] * extra_empty  # Raw_Block of size 0, not last
        last = struct.pack("<I", len(b) << 3 | 1)[:3] + b
        return hdr + blocks + last
    return f


def frame_of_length(extra):
    """A raw-block frame zstd_bound(n) + extra bytes long (empty blocks fill it)."""
    def f(b):
        room = zstd_bound(len(b)) + extra - len(raw_block_frame(0)(b))
        assert room >= 0 and room % 3 == 0, "pick a chunk length whose room is a multiple of 3"
        fr = raw_block_frame(room // 3)(b)
        assert zstandard.ZstdDecompressor().decompress(fr, max_output_size=len(b)) == b
        return fr
    return f


def dict_id_frame(b):
    """A frame whose header names dictionary id 7 (content itself needs none)."""
    f = bytearray(zstandard.ZstdCompressor(level=3, write_dict_id=False).compress(b))
    fhd = f[4]
    assert fhd & 3 == 0
    f[4] = fhd | 1                         # Dictionary_ID_flag = 1: one byte
    wd = 0 if fhd & 0x20 else 1            # window descriptor present unless single segment
    at = 5 + wd
    return bytes(f[:at] + b"\x07" + f[at:])


def cases():
    """[(name, rule, builder kwargs for ckpack.write_pack, verdict, expect)]."""
    A, R = "accept", "reject"
    c = []

    def case(name, rule, verdict, files, expect="", **kw):
        c.append(dict(name=name, rule=rule, verdict=verdict, files=files, expect=expect, **kw))

    # ---- accepted: what ckptfs writes, and odd but valid packs -------------------------
    case("plain", "§3-§7", A, [st_file(), blob()])
    case("empty-file", "§4 empty source has no extents", A, [File("empty.bin", [])])
    case("split-tensor", "§4 one tensor in several extents", A,
         [File("m.safetensors", [Extent(K15, W[:2048], chunk_size=CS), Extent(K15, W[2048:], chunk_size=CS)], kind=1)])
    # safetensors files whose tensors are not one extent each, named for it
    # (§3.2 names are informational, §4 any tiling): loaders must read them
    # (check_loaders.py reads every tensor of the accepted ones through libckread)
    case("st-extent-names-differ", "§3.2 extent names are informational", A,
         [st_tiled("m.safetensors", lambda spans, n: [spans[0][0]] + [b for a, b in spans])])
    case("st-tensor-split", "§4 tensors split over several extents, header too", A,
         [st_tiled("m.safetensors", lambda spans, n: [20, spans[0][0], spans[0][0] + 2000, spans[0][0] + 4002,
                                                     spans[1][0] + 100, spans[2][0] + 1000])])
    case("st-tensors-share-extent", "§4 several tensors in one extent, with the header", A,
         [st_tiled("m.safetensors", lambda spans, n: [spans[1][0] + 2])])
    # §7 links (manifest format 2): targets as written, inside the tree or not
    case("links", "§7 links: any target text, inside the tree or not", A,
         [blob("blobs/abc"), blob("top.bin")], dirs=[("blobs", 0o755), ("snap", 0o755), ("snap/r1", 0o755)],
         links=[("snap/r1/config.json", "../../blobs/abc"), ("snap/r1/outside", "../../../../elsewhere"),
                ("abs", "/etc/hostname"), ("dangling", "no such file"), ("l" * 255, "t" * 4095),
                ("snap/dirlink", "r1")])
    case("links-ignored-in-format-1", "§7 links is an unknown key in format 1", A, [blob()],
         manifest_edit=lambda d: dict(d, links=[{"path": "x", "target": "y"}, 5]))
    case("multi-extent-blob", "§4 a blob in several extents", A,
         [File("b.bin", [Extent(RAW, T[:1000], chunk_size=300), Extent(ZSTD, T[1000:3000], chunk_size=700),
                         Extent(RAW, T[3000:], chunk_size=4096)])])
    case("bf16-as-zstd", "§4 encoding is free per extent", A,
         [File("m.safetensors", [Extent(ZSTD, W, chunk_size=1024, dtype=7)], kind=1)])
    case("k15-in-blob", "§4 encoding is free per extent", A, [File("w.bin", [Extent(K15, W, chunk_size=CS)])])
    case("bsplit-in-blob", "§4 encoding is free per extent", A, [File("w.bin", [Extent(BSPLIT, W2, chunk_size=CS)])])
    case("shared-planes", "§3 payloads may overlap", A,
         [File("w.bin", [Extent(K15, W, chunk_size=CS), Extent(K15, W, chunk_size=CS, share=0)])])
    case("shared-raw", "§3 payloads may overlap", A,
         [File("w.bin", [Extent(RAW, T, chunk_size=999), Extent(RAW, T, chunk_size=999, share=0)])])
    case("codebook-duplicates", "§5.2 duplicate codebook entries", A,
         [File("w.bin", [Extent(K15, W, chunk_size=CS, codebook=[0x1F8] * 15 + [0])])])
    case("codebook-unused", "§5.2 unused codebook entries", A,
         [File("w.bin", [Extent(BSPLIT, W, chunk_size=CS, codebook=[0xFF, 0xFE, 0x3C, 0xBC] + list(range(11)) + [0])])])
    case("all-escapes", "§5.2 every weight escaped", A,
         [File("w.bin", [Extent(K15, W[:1000], chunk_size=48, codebook=[511] * 15 + [0])])])
    case("odd-weight-count", "§5.1 odd n: unused high nibble", A,
         [File("w.bin", [Extent(K15, W2, chunk_size=CS)])])
    case("padding-bits-set", "§5.1 readers ignore padding bits", A,
         [File("w.bin", [Extent(K15, W2, chunk_size=CS)], damage=pad_bits(0))])
    case("gap-bytes-nonzero", "§3 readers ignore gap bytes", A, [blob(align=64, gap_fill=b"\xa5")])
    case("no-alignment", "§3 readers do not rely on alignment", A, [st_file(align=1)])
    case("reverse-payloads", "§3 payloads in any order", A, [st_file(reverse=True)])
    case("dtype-unknown", "§4.3 dtype is informational", A,
         [File("w.bin", [Extent(K15, W, chunk_size=CS, dtype=4000)])])
    case("dtype-unknown-codes", "§4.3 dtype is informational (codes this reader does not name)", A,
         [File("w.bin", [Extent(K15, W, chunk_size=CS, dtype=23), Extent(RAW, T, chunk_size=CS, dtype=24),
                         Extent(RAW, T[:77], chunk_size=CS, dtype=31), Extent(RAW, T[:99], chunk_size=CS, dtype=40)])])
    case("chunk-16", "§4.1 smallest BF16 chunk", A, [File("w.bin", [Extent(BSPLIT, W[:200], chunk_size=16)])])
    case("chunk-1", "§4.1 RAW/ZSTD chunk of one byte", A,
         [File("b.bin", [Extent(RAW, T[:50], chunk_size=1), Extent(ZSTD, T[50:70], chunk_size=1)])])
    case("chunk-16MiB", "§4.1 largest chunk", A, [File("b.bin", [Extent(RAW, T, chunk_size=16 << 20)])])
    case("zstd-checksum", "§6.1 frame checksum allowed", A,
         [File("b.bin", [Extent(ZSTD, T, chunk_size=1000, frame=lambda b: zframe(b, write_checksum=True))])])
    case("zstd-no-content-size", "§6.1 content size optional", A,
         [File("b.bin", [Extent(ZSTD, T, chunk_size=1000, frame=lambda b: zframe(b, write_content_size=False))])])
    case("zstd-raw-blocks", "§6.1 any block types", A,
         [File("b.bin", [Extent(ZSTD, noise(3000), chunk_size=1000)])])
    case("zstd-frame-at-bound", "§6.1 a frame as long as zstd's bound", A,
         [File("b.bin", [Extent(ZSTD, T, chunk_size=1000, frame=frame_of_length(0))])])
    case("mode-high-bits", "§3.2 TOC mode bits above 07777 ignored", A, [blob(mode=0o100644)])
    case("names-share-bytes", "§3.2 strings may share bytes", A,
         [File("w.bin", [Extent(RAW, T[:10], name=b"x"), Extent(RAW, T[10:20], name=b"x")])])
    case("names-fill-table", "§3.2 names adding up to strtab_size", A,
         [File("w.bin", [Extent(RAW, T[:10]), Extent(RAW, T[10:20])], edit=names_at((0, 3), (3, 2)))])
    case("utf8-names", "§2 UTF-8 names", A,
         [File("modèle/données.bin".encode(), [Extent(RAW, T[:100])])], dirs=[("modèle", 0o755)])
    case("longest-names", "§2 a 255-byte directory, a 250-byte file name (255 with .ckpt)", A,
         [blob("d" * 255 + "/" + "f" * 250)], dirs=[("d" * 255, 0o755)])
    case("manifest-free-layout", "§7 JSON layout free, unknown keys ignored, any order", A,
         [blob("a"), blob("b/c")], dirs=[("b", 0o755), ("empty", 0o700)],
         manifest_edit=lambda d: reorder(d))
    case("unlisted-ckpt", "§2 the manifest is authoritative", A, [blob()],
         extra={"stray.ckpt": b"not a packed file"})
    case("toc-meta-differs", "§3.2 manifest wins for mode and mtime", A,
         [blob(mode=0o600, mtime_ns=5)], manifest_edit=lambda d: set_file(d, mode=0o640, mtime_ns="17"))
    case("mtime-negative", "§7 mtime_ns grammar", A, [blob(mtime_ns=-1000)])
    case("mtime-19-digits", "§7 mtime_ns grammar", A, [blob(mtime_ns=-9223372036854775807)])
    case("name-65535", "§4.1 name_len 65535", A,
         [File("w.bin", [Extent(RAW, T[:10], name=b"n" * 65535)])])
    case("mtime-int64-min", "§7 mtime_ns within int64", A, [blob(mtime_ns=-2 ** 63)])
    case("manifest-nested-1000", "§7 nesting 1000 deep (the root object is the first level)", A,
         [blob()], manifest_edit=lambda d: json_text(dict(d, note="X")).replace(b'"X"', b"[" * 999 + b"]" * 999))
    case("manifest-surrogate-pair", "§7 a surrogate pair escape is one character", A,
         [blob()], manifest_edit=lambda d: json_text(dict(d, note="X")).replace(b'"X"', b'"\\ud83d\\ude00"'))
    case("manifest-number-forms", "§7 size, mode, format: numbers whose value is a whole number", A,
         [blob()], manifest_edit=lambda d: json_text(dict(d, note="X")).replace(b'"mode": 420', b'"mode": 4.2e2')
         .replace(b'"size": 5000', b'"size": 5000.0').replace(b'"format": 1', b'"format": 1E+0')
         .replace(b'"X"', b"[-0, 1e-2, -1.5E-3, 0.0]"))

    # ARCHIVE (§5.3): W as a 24 x 125 matrix, chunks of 256 weights
    case("archive-plain", "§5.3 ARCHIVE, M = 3, one class", A,
         [File("w.bin", [Extent(ARCHIVE, W, chunk_size=CS, ans=Ans(m=3))])])
    case("archive-modes", "§5.3 every M, K (also not a power of 2), both axes, uniform tables, RAW mode", A,
         [File("m.safetensors", [
             Extent(ARCHIVE, W, chunk_size=CS, ans=Ans(m=0)),
             Extent(ARCHIVE, W, chunk_size=CS, ans=Ans(m=4, k=16, axis=0, c=125)),
             Extent(ARCHIVE, W, chunk_size=CS, ans=Ans(m=2, k=3, axis=1, c=125, cmap=[i % 3 for i in range(24)])),
             Extent(ARCHIVE, W, chunk_size=CS, ans=Ans(m=1, k=2, axis=0, c=1, cmap=[1], uniform=range(0, 40, 2))),
             Extent(ARCHIVE, W2, chunk_size=CS, ans=Ans(m=3, k=5, axis=0, c=7, cmap=[0, 4, 1, 3, 2, 4, 4])),
             Extent(ARCHIVE, W[:600], chunk_size=CS, ans=Ans(mode=0)),
             Extent(ARCHIVE, W[:34], chunk_size=32, ans=Ans(m=4))], kind=0)])

    # ---- rejected: one broken rule each ---------------------------------------------
    def rej(name, rule, expect, f=None, **kw):
        case(name, rule, R, [f or blob()], expect, **kw)

    rej("bad-magic", "R1 magic", "not a ckptfs packed file", blob(edit=edit("hdr", magic=b"\x89CKPTFS\r")))
    rej("major-2", "R2 major", "version", blob(edit=edit("hdr", major=2)))
    rej("major-0", "R2 major", "version", blob(edit=edit("hdr", major=0)))
    rej("minor-2", "R3 minor", "version", blob(edit=edit("hdr", minor=2)))
    rej("flags", "R4 flags", "flag", blob(edit=edit("hdr", flags=4)))
    rej("header-hash", "R5 header hash", "header", blob(edit=edit("hdr", header_hash=1)))
    rej("order-magic-first", "R1 before R5 (§3.1 check order)", "not a ckptfs packed file",
        blob(edit=edit("hdr", magic=b"\x89CKPTFS\r", header_hash=1)))
    rej("order-hash-before-version", "R5 before R2 (§3.1 check order)", "file header is damaged",
        blob(edit=edit("hdr", major=2, header_hash=1)))
    rej("file-size", "R6 file_size", "header says", blob(edit=edit("hdr", file_size=10 ** 6)))
    rej("file-truncated", "R6 file_size", "header says", blob(damage=lambda b, c: b[:-1]))
    rej("toc-offset-odd", "R7 toc_offset multiple of 8", "table of contents",
        blob(edit=shift_toc(4)))
    rej("toc-size-short", "R7 toc_size", "table of contents", blob(edit=edit("hdr", toc_size=95)))
    rej("toc-size-88", "R7 toc_size >= 96 (the file ends with the TOC)", "table of contents",
        blob(damage=short_toc(88)))
    rej("toc-not-at-end", "R7 toc_offset + toc_size = file_size", "table of contents",
        blob(damage=bytes_after_toc(8)))
    rej("toc-hash", "R8 TOC hash", "table of contents", blob(edit=edit("hdr", toc_hash=5)))
    rej("toc-magic", "R9 TOC magic", "table of contents", blob(edit=edit("toc", magic=b"TOC2")))
    rej("toc-reserved", "R9 TOC reserved", "table of contents", blob(edit=edit("toc", reserved=b"\1" + bytes(23))))
    rej("toc-sizes", "R10 toc_size = 96+192n+strtab", "table of contents",
        blob(edit=edit("toc", strtab_size=3)))
    rej("toc-original-size", "R11 TOC original_size", "original_size 1 differs", blob(edit=edit("toc", original_size=1)))
    rej("kind-2", "R12 kind", "unknown kind 2", blob(edit=edit("toc", kind=2)))
    rej("path-len-0", "R13 path_len", "path_len is 0", blob(edit=edit("toc", path_len=0)))
    rej("path-len-over-strtab", "R13 path_len <= strtab_size", "path_len 12 is over",
        blob(edit=edit("toc", path_len=12)))
    rej("path-nul", "R13 NUL in path", "safe relative path", blob(edit=path_is(b"con\0fig.json")))
    rej("path-dotdot", "R13 path", "safe relative path", blob(edit=path_is(b"../config.json")))
    rej("path-absolute", "R13 path", "safe relative path", blob(edit=path_is(b"/config.json")))
    rej("path-not-utf8", "R56 manifest not UTF-8 (R13 in the TOC too)", "not UTF-8", blob(b"caf\xe9.json"), manifest_edit=raw_json)
    rej("path-overlong-utf8", "R56 manifest not UTF-8 (R13 in the TOC too)", "not UTF-8", blob(b"\xc0\xafetc"), manifest_edit=raw_json)
    rej("path-lone-surrogate", "R56 lone-surrogate escape in a path", "invalid manifest JSON", blob(b"caf\xe9.json"))
    rej("toc-path-not-utf8", "R13 path is UTF-8", "safe relative path", blob(edit=path_is(b"caf\xe9.json")))
    rej("toc-path-component-256", "R13 path components <= 255 bytes", "has a component over 255 bytes",
        blob(edit=path_is(b"d" * 256 + b"/config.json")))
    rej("toc-path-name-251", "R13 file name <= 250 bytes", "last component over 250 bytes",
        blob(edit=path_is(b"f" * 251)))
    rej("path-vs-manifest", "R30 TOC path = manifest path", "does not match its manifest entry", blob(edit=path_is(b"other.json")))
    rej("extent-gap", "R14 tiling", "does not tile", st_file(edit=edit_rec(2, orig_offset=6000 + 256 + 1)))
    rej("extent-short", "R14 tiling", "cover", st_file(edit=drop_last_rec))
    rej("extent-empty", "R14 orig_size > 0", "does not tile", File("b.bin", [Extent(RAW, b"")]))
    rej("encoding-4", "R15 encoding", "encoding", blob(edit=edit_rec(0, encoding=4)))
    rej("chunk-size-0", "R16 chunk_size", "chunk size", blob(edit=edit_rec(0, chunk_size=0)))
    rej("chunk-size-over", "R16 chunk_size", "chunk size", blob(edit=edit_rec(0, chunk_size=(16 << 20) + 1)))
    rej("chunk-size-bf16-8", "R16 BF16 chunk multiple of 16", "chunk size",
        File("w.bin", [Extent(K15, W, chunk_size=CS)], edit=edit_rec(0, chunk_size=520)))
    rej("n-chunks", "R17 n_chunks", "chunk count", blob(edit=edit_rec(0, n_chunks=4)))
    rej("extent-reserved", "R18 reserved", "reserved bytes are not zero", blob(edit=edit_rec(0, reserved=b"\1" + bytes(43))))
    rej("name-outside", "R19 name in string table", "lies outside the string table",
        blob(edit=edit_rec(0, name_off=5, name_len=100)))
    rej("name-65536", "R19 name_len <= 65535", "name_len 65536 is over",
        File("w.bin", [Extent(RAW, T[:10], name=b"n" * 65536)]))
    rej("name-past-table-end", "R19 name in string table", "lies outside the string table",
        File("w.bin", [Extent(RAW, T[:10])], edit=names_at((4, 2))))
    rej("name-too-long", "R19 name_len", "name_len 70000 is over", blob(edit=edit_rec(0, name_len=70000)))
    rej("unused-plane-set", "R20 unused planes 0/0", "unused plane",
        blob(edit=edit_rec(0, plane1_offset=64)))
    rej("plane-in-header", "R21 payload in [64, toc_offset]", "outside",
        File("b.bin", [Extent(RAW, T)], edit=edit_rec(0, plane0_offset=0)))
    rej("plane-past-toc", "R21 payload in [64, toc_offset]", "outside",
        File("b.bin", [Extent(RAW, T)], edit=edit_rec(0, plane0_offset=1 << 40)))
    rej("index-outside", "R22 index in [64, toc_offset]", "chunk index lies outside", blob(edit=edit_rec(0, index_offset=8)))
    rej("bf16-odd-size", "R23 BF16 orig_size even", "plane sizes",
        File("w.bin", [Extent(K15, W, chunk_size=CS), Extent(RAW, b"x")], edit=odd_bf16))
    rej("plane-size", "R23 plane sizes", "plane sizes",
        File("w.bin", [Extent(K15, W, chunk_size=CS)], edit=grow_plane(1, 8)))
    rej("escapes-over-n", "R23 n_escapes <= n", "plane sizes",
        File("w.bin", [Extent(BSPLIT, W[:64], chunk_size=64)], edit=edit_rec(0, n_escapes=33)))
    rej("escapes-over-n-sized", "R23 n_escapes <= n (its plane sized for it)", "plane sizes",
        File("w.bin", [Extent(BSPLIT, W[:64], chunk_size=64)], edit=edit_rec(0, n_escapes=33, plane2_offset=64, plane2_size=48)))
    rej("codebook-512", "R24 codebook range", "codebook",
        File("w.bin", [Extent(K15, W, chunk_size=CS)], edit=cb_entry(3, 512)))
    rej("codebook-bs-256", "R24 codebook range", "codebook",
        File("w.bin", [Extent(BSPLIT, W, chunk_size=CS)], edit=cb_entry(3, 256)))
    rej("codebook-15", "R24 entry 15 is 0", "codebook",
        File("w.bin", [Extent(K15, W, chunk_size=CS)], edit=cb_entry(15, 1)))
    rej("raw-codebook", "R25 RAW/ZSTD fields", "codebook is set", blob(edit=cb_entry(0, 1)))
    rej("raw-escapes", "R25 RAW/ZSTD fields", "n_escapes is set", blob(edit=edit_rec(0, n_escapes=1)))
    rej("raw-plane-size", "R25 RAW plane0_size", "plane0_size 4999 of a raw extent",
        File("b.bin", [Extent(RAW, T)], edit=grow_plane(0, -1)))
    rej("index-hash", "R26 index hash", "chunk index of extent 0 (header) is damaged", blob(damage=flip_index(0)))
    rej("raw-datum", "R27 RAW datum 0", "chunk index of extent 0 is inconsistent",
        File("b.bin", [Extent(RAW, T, chunk_size=1000)], damage=set_datum(0, 1, 5)))
    rej("zstd-datum-first", "R27 ZSTD datums", "chunk index of extent 0 is inconsistent", blob(damage=set_datum(0, 0, 1)))
    rej("zstd-datum-order", "R27 ZSTD datums", "chunk index of extent 0 is inconsistent", blob(damage=set_datum(0, 2, 1)))
    rej("k15-datum-order", "R27 BF16 datums", "chunk index of extent 0 is inconsistent",
        File("w.bin", [Extent(K15, W, chunk_size=CS)], damage=set_datum(0, 3, 0)))
    rej("k15-datum-over", "R27 BF16 datums", "chunk index of extent 0 is inconsistent",
        File("w.bin", [Extent(K15, W, chunk_size=CS)], damage=set_datum(0, 11, 10 ** 6)))
    rej("index-outside-file", "R22 index in [64, toc_offset]", "chunk index lies outside",
        File("b.bin", [Extent(RAW, T)], edit=amplify))
    rej("index-amplified", "R28 indexes fit in the file", "chunk index",
        File("b.bin", [Extent(RAW, T, chunk_size=1), Extent(RAW, T, chunk_size=1, share=0),
                       Extent(RAW, T, chunk_size=1, share=0)]))
    # §3.2, R19: the names' lengths add up to at most strtab_size (the path "w.bin" is the table)
    rej("names-one-over-table", "R19 names fit in the string table", "names",
        File("w.bin", [Extent(RAW, T[:10]), Extent(RAW, T[10:20])], edit=names_at((0, 3), (0, 3))))
    rej("names-amplified", "R19 names fit in the string table", "names",
        File("b.bin", [Extent(RAW, T[i:i + 1], name=b"n" * 40) for i in range(4)], edit=names_overlap))
    # per chunk (R40-R43): the file opens, the damaged chunk is an error
    rej("chunk-hash", "R43 chunk hash", "damaged chunk", File("b.bin", [Extent(RAW, T, chunk_size=1000)],
                                                              damage=flip_plane(0, 0, 1500)),
        damaged=(1000, 2000))
    rej("k15-low-damaged", "R43 chunk hash", "damaged chunk",
        File("w.bin", [Extent(K15, W, chunk_size=CS)], damage=flip_plane(0, 1, 100)), damaged=(0, 512))
    rej("k15-late-chunk", "R43 chunk hash, §9.3 reach", "damaged chunk",
        File("w.bin", [Extent(K15, W, chunk_size=CS)], damage=flip_plane(0, 1, 2100)), damaged=(4608, 5120))
    rej("k15-escape-damaged", "R43 chunk hash", "damaged chunk",
        File("w.bin", [Extent(K15, W, chunk_size=CS)], damage=flip_plane(0, 2, 3)))
    rej("code-15-count", "R42 code-15 count = escape count", "damaged chunk",
        File("w.bin", [Extent(K15, W, chunk_size=CS)], damage=set_code(0, 0, 15)))
    rej("zstd-damaged", "R40 or R43: a damaged frame byte (a literal decodes to other bytes)", "damaged chunk", blob(damage=flip_plane(0, 0, 30)))
    rej("zstd-short", "R41 frame decodes to the chunk length", "damaged chunk",
        File("b.bin", [Extent(ZSTD, T, chunk_size=1000, frame=lambda b: zframe(b[:-1]))]))
    rej("zstd-reserved-bit", "R40 frame header's reserved bit set (RFC 8878)", "damaged chunk",
        File("b.bin", [Extent(ZSTD, T, chunk_size=1000, frame=reserved_bit)]))
    rej("zstd-seq-modes-reserved", "R44 reserved bits of Symbol_Compression_Modes set (RFC 8878)", "damaged chunk",
        File("b.bin", [Extent(ZSTD, T, chunk_size=1000, frame=seq_modes_reserved)]))
    rej("zstd-skippable", "R44 zstd profile: no skippable frame", "damaged chunk",
        File("b.bin", [Extent(ZSTD, T, chunk_size=1000, frame=skippable)]))
    rej("zstd-two-frames", "R44 zstd profile: one frame", "damaged chunk",
        File("b.bin", [Extent(ZSTD, T, chunk_size=1000, frame=two_frames)]))
    rej("zstd-trailing", "R44 zstd profile: no trailing bytes", "damaged chunk",
        File("b.bin", [Extent(ZSTD, T, chunk_size=1000, frame=trailing)]))
    rej("zstd-dictionary", "R44 zstd profile: no dictionary", "damaged chunk",
        File("b.bin", [Extent(ZSTD, T, chunk_size=1000, frame=dict_id_frame)]))
    rej("zstd-window", "R44 zstd profile: window <= 16 MiB", "damaged chunk",
        File("b.bin", [Extent(ZSTD, T, chunk_size=1000, frame=big_window)]))
    rej("zstd-frame-over-bound", "R47 zstd frame longer than zstd's bound", "damaged chunk",
        File("b.bin", [Extent(ZSTD, T[:1000], chunk_size=1000, frame=frame_of_length(3)),
                       Extent(RAW, T[1000:])]), damaged=(0, 1000))
    # all weights escaped, then chunk 0 claims one escape of chunk 1: 257 escapes for
    # 256 weights (R46, refused before its planes are read) and chunk 1 one short (R42)
    rej("escapes-over-weights", "R46 more escapes than weights in a chunk", "damaged chunk",
        File("w.bin", [Extent(K15, W, chunk_size=CS, codebook=[511] * 15 + [0])], damage=set_datum(0, 1, 257)),
        damaged=(0, 2 * CS))
    AW = [Extent(ARCHIVE, W, chunk_size=CS, ans=Ans(m=3))]
    rej("archive-in-1.0", "R15 ARCHIVE is not an encoding of 1.0", "unknown encoding 4",
        File("w.bin", AW, edit=edit("hdr", minor=0)))
    rej("archive-chunk-size", "R16 ARCHIVE chunk_size a multiple of 32", "invalid chunk size",
        File("w.bin", [Extent(ARCHIVE, W, chunk_size=CS - 16, ans=Ans(m=3))]))
    rej("archive-datum-order", "R27 ARCHIVE datums increase", "chunk index of extent 0 is inconsistent",
        File("w.bin", AW, damage=set_datum(0, 2, 0)))
    rej("archive-m-5", "R29 M <= 4", "invalid archive tables", File("w.bin", AW, damage=put_plane(0, 0, b"\5", at=1)))
    rej("archive-table-sum", "R29 a table sums to 4096", "invalid archive tables",
        File("w.bin", [Extent(ARCHIVE, W[:64], chunk_size=CS, ans=Ans(m=0))], damage=bump_last(0)))
    rej("archive-trailing-table-byte", "R29 nothing after the tables", "invalid archive tables",
        File("w.bin", AW, edit=grow_plane(0, 1)))
    # tables shared by several extents (§3 allows it) count once per extent (R29)
    AS = Ans(m=0, k=16, axis=1, c=1)  # a class per weight: tables of ~n/2 bytes
    case("archive-shared-tables", "§3 payloads may overlap; R29 tables fit in the file", A,
         [File("w.bin", [Extent(ARCHIVE, W, chunk_size=CS, ans=AS), Extent(ARCHIVE, W, chunk_size=CS, share=0)])])
    rej("archive-tables-amplified", "R29 all ARCHIVE tables together fit in the file", "archive tables",
        File("w.bin", [Extent(ARCHIVE, W, chunk_size=CS, ans=AS)] +
             [Extent(ARCHIVE, W, chunk_size=CS, share=0) for _ in range(5)]))
    rej("archive-codebook", "R29 ARCHIVE codebook zero", "archive extent", File("w.bin", AW, edit=cb_entry(0, 1)))
    rej("archive-word", "R48/R43 a damaged word", "damaged chunk",
        File("w.bin", AW, damage=flip_plane(0, 1, 200)), damaged=(0, CS))
    rej("archive-state", "R48 an initial state out of range", "damaged chunk",
        File("w.bin", AW, damage=put_plane(0, 1, b"\0\0\0\x80")), damaged=(0, CS))
    rej("archive-over-bound", "R48 a stream longer than 64 + 5n + 16", "damaged chunk",
        File("w.bin", [Extent(ARCHIVE, noise(64), chunk_size=32, ans=Ans(m=0))],
             damage=lambda b, ctx: set_datum(0, 1, ctx["recs"][0]["planes"][1][1] - 1)(b, ctx)),
        damaged=(0, 64))
    rej("sha256", "R45 whole-file SHA-256", "SHA-256",
        File("b.bin", [Extent(RAW, T)], edit=edit("toc", sha256=bytes(32))),
        manifest_edit=lambda d: set_file(d, sha256="00" * 32))
    # ---- manifest (§7) ------------------------------------------------------------------
    rej("manifest-hash", "R50 manifest hash", "manifest is damaged (checksum mismatch)", manifest_damage=lambda t: t[:-2] + b" }")
    rej("manifest-missing-file", "R51 listed file present", "ghost.bin", blob(),
        manifest_edit=lambda d: add_file(d, "ghost.bin"))
    rej("manifest-size", "R52 manifest = TOC", "does not match its manifest entry", manifest_edit=lambda d: set_file(d, size=1))
    rej("manifest-sha", "R52 manifest = TOC", "does not match its manifest entry", manifest_edit=lambda d: set_file(d, sha256="ab" * 32))
    rej("manifest-format-3", "R53 format 1 or 2", "manifest format 3", manifest_edit=lambda d: dict(d, format=3))

    def links(*ls):
        return lambda d: dict(d, format=2, links=list(ls))
    rej("manifest-format-2-no-links", "R56 links an array in format 2", '"links" is missing',
        manifest_edit=lambda d: dict(d, format=2))
    rej("manifest-links-object", "R56 links an array in format 2", '"links" is not an array',
        manifest_edit=lambda d: dict(d, format=2, links={}))
    rej("manifest-link-not-object", "R54 entries are objects", "link entry 0 is not an object",
        manifest_edit=links(5))
    rej("manifest-link-target-empty", "R54 link target 1 to 4095 bytes", '"target" is not 1 to 4095 bytes',
        manifest_edit=links({"path": "l", "target": ""}))
    rej("manifest-link-target-4096", "R54 link target 1 to 4095 bytes", '"target" is not 1 to 4095 bytes',
        manifest_edit=links({"path": "l", "target": "t" * 4096}))
    rej("manifest-link-target-number", "R54 link target a string", '"target" is not a string',
        manifest_edit=links({"path": "l", "target": 5}))
    rej("manifest-link-target-missing", "R54 link target a string", '"target" is missing',
        manifest_edit=links({"path": "l"}))
    rej("manifest-link-path-dotdot", "R54 link path", '"path" "../l"', manifest_edit=links({"path": "../l", "target": "x"}))
    rej("manifest-link-is-file", "R55 unique names", "is both a file and a link",
        manifest_edit=links({"path": "config.json", "target": "x"}))
    rej("manifest-link-is-dir", "R55 unique names", "is both a directory and a link", blob("d/x.json"),
        dirs=[("d", 0o755)], manifest_edit=links({"path": "d", "target": "x"}))
    rej("manifest-link-twice", "R55 unique names", "is listed twice as a link",
        manifest_edit=links({"path": "l", "target": "x"}, {"path": "l", "target": "y"}))
    rej("manifest-link-parent", "R55 parents listed", "parent directory of", manifest_edit=links({"path": "d/l", "target": "x"}))
    rej("manifest-kind", "R54 kind", '"kind" is neither', manifest_edit=lambda d: set_file(d, kind="tensor"))
    rej("manifest-mode", "R54 mode <= 07777", '"mode" is not an integer from 0 to 07777', manifest_edit=lambda d: set_file(d, mode=0o100644))
    rej("manifest-mtime", "R54 mtime_ns grammar", '"mtime_ns" is not a string of', manifest_edit=lambda d: set_file(d, mtime_ns="1e9"))
    rej("manifest-mtime-plus", "R54 mtime_ns grammar", '"mtime_ns" is not a string of',
        manifest_edit=lambda d: set_file(d, mtime_ns="+17"))
    rej("manifest-mtime-space", "R54 mtime_ns grammar", '"mtime_ns" is not a string of',
        manifest_edit=lambda d: set_file(d, mtime_ns=" 17"))
    rej("manifest-path-nul", "R56 no \\u0000 escape (a NUL in a path)", "NUL",
        manifest_edit=lambda d: set_file(d, path=d["files"][0]["path"] + "\0x"))
    # a name over 255 bytes cannot be made on disk (NAME_MAX): only the manifest lists it
    rej("manifest-dir-name-256", "R54 path components <= 255 bytes", "has a component over 255 bytes",
        manifest_edit=lambda d: dict(d, dirs=[{"path": "d" * 256, "mode": 0o755}]))
    rej("manifest-file-name-251", "R54 file name <= 250 bytes", "has a last component over 250 bytes",
        manifest_edit=lambda d: set_file(d, path="f" * 251))
    rej("manifest-path-4097", "R54 path <= 4096 bytes", "is over 4096 bytes",
        manifest_edit=lambda d: dict(d, dirs=[{"path": "/".join(["d" * 255] * 16) + "/d", "mode": 0o755}]))
    rej("manifest-not-utf8", "R56 UTF-8 JSON", "invalid manifest JSON",
        manifest_edit=lambda d: raw_json(dict(d, note="caf\udce9")))
    rej("manifest-sha-upper", "R54 sha256 lowercase", '"sha256" is not 64 lowercase hex digits',
        manifest_edit=lambda d: set_file(d, sha256=d["files"][0]["sha256"].upper()))
    rej("manifest-parent", "R55 parents listed", "parent", blob("d/x.json"), dirs=[("d", 0o755)],
        manifest_edit=lambda d: dict(d, dirs=[]))
    rej("manifest-dup", "R55 unique names", "duplicate",
        manifest_edit=lambda d: dict(d, files=d["files"] * 2))
    rej("manifest-not-object", "R56 an object", "not an object", manifest_edit=lambda d: b"[]")
    rej("manifest-format-string", "R56 format a number", '"format" is not a number',
        manifest_edit=lambda d: dict(d, format="1"))
    rej("manifest-dirs-missing", "R56 dirs an array", '"dirs" is missing',
        manifest_edit=lambda d: {"format": 1, "files": d["files"]})
    rej("manifest-bom", "R56 no byte order mark", "byte order mark",
        manifest_edit=lambda d: b"\xef\xbb\xbf" + json_text(d))
    rej("manifest-files-object", "R56 files an array", '"files" is not an array',
        manifest_edit=lambda d: dict(d, files={}))
    rej("manifest-mode-fraction", "R54 mode a whole number", '"mode" is not an integer',
        manifest_edit=lambda d: set_file(d, mode=420.5))
    rej("manifest-path-number", "R54 path a string", '"path" is not a string', manifest_edit=lambda d: set_file(d, path=5))
    rej("manifest-mtime-int64", "R54 mtime_ns within int64", '"mtime_ns" is not a string of',
        manifest_edit=lambda d: set_file(d, mtime_ns="-9223372036854775809"))
    rej("manifest-dir-not-object", "R54 entries are objects", "directory entry 0 is not an object",
        manifest_edit=lambda d: dict(d, dirs=[5]))
    rej("manifest-dup-dir", "R55 unique names", "duplicate directory", blob("d/x.json"),
        dirs=[("d", 0o755)], manifest_edit=lambda d: dict(d, dirs=d["dirs"] * 2))
    # §2, R51: links and special files inside DST are not followed or opened
    rej("ckpt-symlink", "R51 a .ckpt that is a link", "links inside a packed directory are not followed",
        post=lambda dst: link_over(dst, "config.json.ckpt"))
    rej("dir-symlink", "R51 a directory on the way that is a link", "links inside a packed directory are not followed",
        blob("d/x.json"), dirs=[("d", 0o755)], post=lambda dst: link_over(dst, "d"))
    rej("manifest-symlink", "R51 the manifest is a link", "links inside a packed directory are not followed",
        post=lambda dst: link_over(dst, "ckptfs.manifest"))
    rej("ckpt-fifo", "R51 a .ckpt that is a FIFO", "a FIFO", post=lambda dst: fifo_over(dst, "config.json.ckpt"))
    rej("manifest-json", "R56 valid JSON", "invalid manifest JSON", manifest_edit=lambda d: b'{"format": 1, "files": [}')
    # RFC 8259 (§7, R56): one JSON text and nothing after it but whitespace; numbers in its grammar
    rej("manifest-trailing-bytes", "R56 nothing after the JSON", "bytes after the JSON",
        manifest_edit=lambda d: json_text(d) + b"\n x")
    rej("manifest-two-documents", "R56 one JSON document", "bytes after the JSON",
        manifest_edit=lambda d: json_text(d) + json_text(dict(d, files=[])))
    rej("manifest-number-leading-zero", "R56 JSON number grammar", "a number that JSON does not allow",
        manifest_edit=lambda d: json_text(d).replace(b'"mode": 420', b'"mode": 0420'))
    rej("manifest-number-bare-point", "R56 JSON number grammar", "a number that JSON does not allow",
        manifest_edit=lambda d: json_text(d).replace(b'"mode": 420', b'"mode": 420.'))
    # §7, R56: no member name twice in an object (cJSON reads the first, Python's json the last)
    rej("manifest-repeated-path", "R56 no repeated member", 'has the member "path" twice',
        manifest_edit=lambda d: json_text(d).replace(b'"path": "config.json"', b'"path": "config.json", "path": "x.json"'))
    rej("manifest-repeated-files", "R56 no repeated member", 'has the member "files" twice',
        manifest_edit=lambda d: json_text(d).replace(b'"dirs": []', b'"dirs": [], "files": []'))
    rej("manifest-repeated-unknown", "R56 no repeated member, at every level", 'has the member "k" twice',
        manifest_edit=lambda d: json_text(dict(d, note="X")).replace(b'"X"', b'[{"k": 1, "k": 1}]'))
    rej("manifest-nul-unknown-key", "R56 no \\u0000 escape, in any string", "NUL",
        manifest_edit=lambda d: json_text(dict(d, note="X")).replace(b'"X"', b'"a\\u0000b"'))
    rej("manifest-lone-surrogate", "R56 no lone-surrogate escape", "invalid manifest JSON",
        manifest_edit=lambda d: json_text(dict(d, note="X")).replace(b'"X"', b'"\\ud800x"'))
    rej("manifest-nested-1001", "R56 nesting at most 1000 deep", "invalid manifest JSON",
        manifest_edit=lambda d: json_text(dict(d, note="X")).replace(b'"X"', b"[" * 1000 + b"]" * 1000))
    rej("manifest-number-unknown-key", "R56 JSON number grammar, at every level", "a number that JSON does not allow",
        manifest_edit=lambda d: json_text(dict(d, note="X")).replace(b'"X"', b"[1, -.5]"))
    return [x for x in c if x]


# ---- helpers for the edits above --------------------------------------------------------

def json_text(d):
    """The manifest's JSON as ckpack writes it (bytes, indent 1), for edits of the text."""
    return json.dumps(d, indent=1).encode()


def raw_json(d):
    """The manifest with its names as raw bytes (not UTF-8 if they are not)."""
    return json.dumps(d, ensure_ascii=False).encode("utf-8", "surrogateescape")


def reorder(d):
    d["files"].reverse()
    d["dirs"].reverse()
    d["comment"] = "unknown keys are ignored"
    for f in d["files"]:
        f["x-extra"] = [1, 2]
    return d


def set_file(d, **kw):
    d["files"][0].update(kw)
    return d


def add_file(d, path):
    e = dict(d["files"][0], path=path)
    d["files"].append(e)
    d["files"].sort(key=lambda e: e["path"])
    return d


def pad_bits(i):
    """Set the unused high nibble of the last code byte and the padding bits of the low plane."""
    def f(body, ctx):
        r = ctx["recs"][i]
        n = r["orig_size"] // 2
        off, size = r["planes"][0]
        body[off + n // 2] |= 0xF0 if n % 2 else 0
        for b in range((n + 1) // 2, size):
            body[off + b] = 0xFF
        off, size = r["planes"][1]
        bits = 7 * n
        if bits % 8:
            body[off + bits // 8] |= 0xFF << (bits % 8) & 0xFF
        for b in range((bits + 7) // 8, size):
            body[off + b] = 0x5A
        return body
    return f


def shift_toc(by):
    def f(ctx):
        ctx["body"] += bytes(by)
        ctx["hdr"]["toc_offset"] += by
    return f


def path_is(p):
    def f(ctx):
        t = ctx["toc"]
        old = t["path_len"]
        t["strtab"] = p + t["strtab"][old:]
        t["path_len"] = len(p)
        t["strtab_size"] = len(t["strtab"])
        for r in ctx["recs"]:
            if r["name_len"]:
                r["name_off"] += len(p) - old
    return f


def drop_last_rec(ctx):
    ctx["recs"].pop()
    ctx["toc"]["n_extents"] -= 1


def odd_bf16(ctx):
    a, b = ctx["recs"]
    a["orig_size"] += 1
    b["orig_offset"] += 1
    b["orig_size"] -= 1
    b["reserved"] = bytes(44)
    # RAW extent of 0 bytes is not allowed either; give it back its byte through the TOC sizes
    ctx["toc"]["original_size"] = a["orig_size"] + b["orig_size"]
    ctx["hdr"]["original_size"] = ctx["toc"]["original_size"]


def put_plane(i, p, data, at=0):
    """Damage hook: overwrite bytes at `at` of plane p of extent i."""
    def f(body, ctx):
        o = ctx["recs"][i]["planes"][p][0] + at
        body[o:o + len(data)] = data
        return body
    return f


def bump_last(i):
    """Damage hook: the last byte of extent i's tables (a one-byte varint of the
    last table) one higher."""
    def f(body, ctx):
        off, size = ctx["recs"][i]["planes"][0]
        body[off + size - 1] += 1
        return body
    return f


def grow_plane(p, by):
    def f(ctx):
        off, size = ctx["recs"][0]["planes"][p]
        ctx["recs"][0]["planes"][p] = (off, size + by)
    return f


def cb_entry(k, v):
    def f(ctx):
        ctx["recs"][0]["codebook"][k] = v
    return f


def index_pos(ctx, i, c):
    return ctx["recs"][i]["index_offset"] + 16 * c


def flip_index(i):
    def f(body, ctx):
        body[index_pos(ctx, i, 0) + 9] ^= 1
        return body
    return f


def set_datum(i, c, v):
    """Change a datum and re-hash the index, so that only the datum rule breaks."""
    import xxhash

    def f(body, ctx):
        r = ctx["recs"][i]
        o = index_pos(ctx, i, c)
        body[o:o + 8] = struct.pack("<Q", v)
        ix = bytes(body[r["index_offset"]:r["index_offset"] + 16 * r["n_chunks"]])
        return rehash_rec(body, ctx, i, index_hash=xxhash.xxh3_64_intdigest(ix))
    return f


def rehash_rec(body, ctx, i, **fields):
    """Rewrite extent record i's fields in the TOC and fix the TOC and header hashes."""
    import ckpack
    ctx["recs"][i].update(fields)
    tb = ckpack.serialize_toc(ctx["toc"], ctx["recs"])
    to = ctx["hdr"]["toc_offset"]
    body[to:to + len(tb)] = tb
    body[40:48] = struct.pack("<Q", ckpack.xxh3(tb))
    body[56:64] = struct.pack("<Q", ckpack.xxh3(body[:56]))
    return body


def set_code(i, w, code):
    def f(body, ctx):
        off = ctx["recs"][i]["planes"][0][0] + w // 2
        sh = 4 * (w % 2)
        body[off] = (body[off] & ~(0xF << sh)) | (code << sh)
        return body
    return f


def amplify(ctx):
    """n_chunks of a RAW extent of 1-byte chunks: the index claims more room than the file has."""
    r = ctx["recs"][0]
    r["chunk_size"] = 1
    r["n_chunks"] = r["orig_size"]
    r["index_offset"] = 64


def short_toc(size):
    """The TOC cut to size bytes, the file ending there, every checksum and size recomputed."""
    def f(body, ctx):
        to = ctx["hdr"]["toc_offset"]
        body = body[:to + size]
        body[32:40] = struct.pack("<Q", size)
        body[40:48] = struct.pack("<Q", xxh3(body[to:]))
        body[48:56] = struct.pack("<Q", len(body))
        body[56:64] = struct.pack("<Q", xxh3(body[:56]))
        return body
    return f


def bytes_after_toc(k):
    """k zero bytes after the TOC, file_size and the header hash made to match."""
    def f(body, ctx):
        body += bytes(k)
        body[48:56] = struct.pack("<Q", len(body))
        body[56:64] = struct.pack("<Q", xxh3(body[:56]))
        return body
    return f


def reserved_bit(b):
    """A frame whose header descriptor sets the reserved bit (RFC 8878 §3.1.1.1.1.4)."""
    f = bytearray(zframe(b))
    f[4] |= 0x08
    return bytes(f)


def seq_modes_reserved(b):
    """A frame whose first compressed block's Symbol_Compression_Modes byte has
    its reserved bits set (RFC 8878 3.1.1.3.2.1: must be zero).  zstd before
    1.5.6 decodes it to the right bytes; later versions refuse it."""
    from ckread import seq_modes_at
    f = bytearray(zframe(b, write_content_size=True))
    assert f[4] == 0x60  # single segment, a 2-byte content size: the blocks start at byte 7
    at = seq_modes_at(bytes(f), 7)
    assert at, "pick data that needs sequences"
    f[at[0]] |= 1
    return bytes(f)


def link_over(dst, rel):
    """DST/rel moved aside and replaced by a symbolic link to it."""
    import os
    p = os.path.join(dst, rel)
    os.rename(p, p + ".real")
    os.symlink(os.path.basename(rel) + ".real", p)


def fifo_over(dst, rel):
    import os
    p = os.path.join(dst, rel)
    os.unlink(p)
    os.mkfifo(p)


def names_at(*refs):
    """Extent i's name is the (name_off, name_len) refs[i] of the string table."""
    def f(ctx):
        for r, (off, n) in zip(ctx["recs"], refs):
            r["name_off"], r["name_len"] = off, n
    return f


def names_overlap(ctx):
    """Every name points at the same 40 bytes: their copies need more than the table holds."""
    for r in ctx["recs"]:
        r["name_off"] = ctx["recs"][0]["name_off"]
