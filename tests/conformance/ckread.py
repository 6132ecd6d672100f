"""ckread.py — a second reader of ckptfs packs, written from docs/format.md alone.

It shares no code with the project's reader (fs/format/container_read.c,
fs/format/manifest.c): fields are read with struct, hashes come from the
`xxhash` package and hashlib, zstd frames are decoded by the `zstandard`
package after their header is checked by hand (RFC 8878 §3.1.1), BF16 planes
are decoded weight by weight (§5), ARCHIVE streams state by state with
the pseudo-code of §5.3.2, and the manifest is parsed with Python's
json module plus the rules of §7.  check_reader.py runs it over every
conformance case, the golden packs and the golden-error files, and it must
reach the verdict (and the status) that ckptfs reaches on each.

A rejection raises Reject(status, rule, why): status is one of §8's
"not-ckptfs", "unsupported", "corrupt", "chunk" (or "io": R51's missing
file); rule is §8's id ("R27").
When a file breaks several rules, the first one met is reported: the checks
run in the order §3.1 gives for the header, then the TOC header's fields,
then each extent record's fields (§8's rule order), the chunk indexes after
all records, and the chunks last.
"""
import hashlib
import json
import os
import re
import stat
import struct
import sys

import xxhash
import zstandard

RAW, ZSTD, K15, BSPLIT, ARCHIVE = 0, 1, 2, 3, 4
MIB = 1 << 20


class Reject(Exception):
    def __init__(self, status, rule, why):
        super().__init__("%s %s: %s" % (status, rule, why))
        self.status, self.rule, self.why = status, rule, why


def corrupt(rule, why):
    raise Reject("corrupt", rule, why)


def xxh3(b):
    return xxhash.xxh3_64_intdigest(bytes(b))


def stored(exact):
    return (exact + 7) // 8 * 8 + 8


def zstd_bound(n):
    return n + (n >> 8) + ((131072 - n) >> 11 if n < 131072 else 0)


# ---- names (§2) ---------------------------------------------------------------

def path_problem(p, is_file):
    """What is wrong with the path p (bytes, UTF-8 already checked), or None."""
    if not p:
        return "empty"
    if p.startswith(b"/"):
        return "absolute"
    if len(p) > 4096:
        return "over 4096 bytes"
    comps = p.split(b"/")
    for c in comps:
        if not c:
            return "an empty component or a trailing /"
        if c in (b".", b".."):
            return "a . or .. component"
        if len(c) > 255:
            return "a component over 255 bytes"
    if is_file and len(comps[-1]) > 250:
        return "a last component over 250 bytes"
    return None


# ---- a packed file (§3-§6) --------------------------------------------------------

class Extent:
    pass


class Packed:
    """A packed file that passed every check of §3-§4 (R1-R28)."""

    def __init__(self, data):
        self.data = data = bytes(data)
        if len(data) < 64:
            raise Reject("not-ckptfs", "R1", "shorter than 64 bytes")
        if data[:8] != b"\x89CKPTFS\n":
            raise Reject("not-ckptfs", "R1", "magic")
        (major, minor, flags, orig, toc_off, toc_size, toc_hash, file_size,
         hhash) = struct.unpack_from("<HHIQQQQQQ", data, 8)
        if xxh3(data[:56]) != hhash:
            corrupt("R5", "header hash")
        if major != 1:
            raise Reject("unsupported", "R2", "version_major %d" % major)
        if minor > 1:
            raise Reject("unsupported", "R3", "version_minor %d" % minor)
        self.minor = minor
        if flags:
            raise Reject("unsupported", "R4", "flags %#x" % flags)
        if file_size != len(data):
            corrupt("R6", "file_size %d, file %d bytes" % (file_size, len(data)))
        if toc_off % 8 or toc_off < 64 or toc_size < 96 or toc_size > 1 << 30 or toc_off + toc_size != file_size:
            corrupt("R7", "TOC position")
        toc = data[toc_off:]
        if xxh3(toc) != toc_hash:
            corrupt("R8", "TOC hash")
        (magic, n, torig, sha, kind, mode, mtime, path_len, strtab_size,
         reserved) = struct.unpack_from("<4sIQ32sIIqII24s", toc, 0)
        if magic != b"TOC1" or any(reserved):
            corrupt("R9", "TOC magic or reserved bytes")
        if n > 1 << 24 or toc_size != 96 + 192 * n + strtab_size:
            corrupt("R10", "TOC sizes")
        if torig != orig:
            corrupt("R11", "TOC original_size")
        if kind > 1:
            corrupt("R12", "kind %d" % kind)
        if path_len == 0 or path_len > 4096 or path_len > strtab_size:
            corrupt("R13", "path_len %d" % path_len)
        strtab = toc[96 + 192 * n:]
        path = strtab[:path_len]
        if b"\0" in path:
            corrupt("R13", "a NUL in the path")
        try:
            path.decode("utf-8")
        except UnicodeDecodeError:
            corrupt("R13", "path not UTF-8")
        why = path_problem(path, True)
        if why:
            corrupt("R13", "path: " + why)
        self.path, self.original_size, self.sha256 = path, orig, sha
        self.kind, self.mode, self.mtime_ns = kind, mode & 0o7777, mtime
        self.extents = []
        pos = names = chunks = tables = 0
        for i in range(n):
            x = self._extent(toc, 96 + 192 * i, pos, orig, toc_off, strtab_size)
            names += x.name_len
            if names > strtab_size:
                corrupt("R19", "names add up to more than strtab_size")
            chunks += x.n_chunks
            if chunks > (toc_off - 64) // 16:
                corrupt("R28", "chunk indexes hold more entries than the file has room for")
            tables += x.planes[0][1] if x.enc == ARCHIVE else 0
            if tables > toc_off - 64:
                corrupt("R29", "ARCHIVE tables take more bytes than the file has room for")
            self.extents.append(x)
            pos += x.orig_size
        if pos != orig:
            corrupt("R14", "extents cover %d of %d bytes" % (pos, orig))
        for x in self.extents:
            ix = data[x.index_offset:x.index_offset + 16 * x.n_chunks]
            if xxh3(ix) != x.index_hash:
                corrupt("R26", "index hash")
            x.index = [struct.unpack_from("<QQ", ix, 16 * c) for c in range(x.n_chunks)]
            d = [e[0] for e in x.index]
            if x.enc == RAW:
                ok = not any(d)
            elif x.enc == ZSTD:
                ok = d[0] == 0 and all(a < b for a, b in zip(d, d[1:])) and d[-1] < x.planes[0][1]
            elif x.enc == ARCHIVE:
                ok = d[0] == 0 and all(a < b for a, b in zip(d, d[1:])) and d[-1] < x.planes[1][1]
            else:
                ok = d[0] == 0 and all(a <= b for a, b in zip(d, d[1:])) and d[-1] <= x.n_escapes
            if not ok:
                corrupt("R27", "datums")
            if x.enc == ARCHIVE:
                x.tables = ans_tables(self.plane(x, 0), x.orig_size // 2)

    def _extent(self, toc, o, pos, orig, toc_off, strtab_size):
        x = Extent()
        (x.orig_offset, x.orig_size, x.enc, x.chunk_size, x.n_chunks, x.index_offset, x.index_hash,
         p0, s0, p1, s1, p2, s2, x.n_escapes) = struct.unpack_from("<QQIIQQQQQQQQQQ", toc, o)
        x.codebook = list(struct.unpack_from("<16H", toc, o + 104))
        name_off, x.name_len, x.dtype = struct.unpack_from("<III", toc, o + 136)
        x.planes = [(p0, s0), (p1, s1), (p2, s2)]
        if x.orig_offset != pos or x.orig_size == 0 or x.orig_size > orig - pos:
            corrupt("R14", "tiling")
        if x.enc > (ARCHIVE if self.minor >= 1 else BSPLIT):
            raise Reject("unsupported", "R15", "encoding %d" % x.enc)
        bf16 = x.enc in (K15, BSPLIT)
        if (x.chunk_size == 0 or x.chunk_size > 16 * MIB or (bf16 and x.chunk_size % 16)
                or (x.enc == ARCHIVE and x.chunk_size % 32)):
            corrupt("R16", "chunk_size %d" % x.chunk_size)
        if x.n_chunks != -(-x.orig_size // x.chunk_size):
            corrupt("R17", "n_chunks")
        if any(toc[o + 148:o + 192]):
            corrupt("R18", "reserved bytes")
        if x.name_len > 65535 or name_off + x.name_len > strtab_size:
            corrupt("R19", "name")
        used = 3 if bf16 else 2 if x.enc == ARCHIVE else 1
        for p, (off, size) in enumerate(x.planes):
            if p >= used and (off or size):
                corrupt("R20", "unused plane %d set" % p)
            if p < used and not (64 <= off and off + size <= toc_off):
                corrupt("R21", "plane %d outside [64, toc_offset]" % p)
        if not (64 <= x.index_offset and x.index_offset + 16 * x.n_chunks <= toc_off):
            corrupt("R22", "chunk index outside [64, toc_offset]")
        if bf16:
            nw = x.orig_size // 2
            k15 = x.enc == K15
            want = (stored((4 * nw + 7) // 8), stored((7 * nw + 7) // 8) if k15 else stored(nw),
                    stored((9 * x.n_escapes + 7) // 8) if k15 else stored(x.n_escapes))
            if x.orig_size % 2 or x.n_escapes > nw or tuple(s for _, s in x.planes) != want:
                corrupt("R23", "BF16 sizes")
            if any(s >= (512 if k15 else 256) for s in x.codebook[:15]) or x.codebook[15]:
                corrupt("R24", "codebook")
        elif x.enc == ARCHIVE:
            if x.orig_size % 2 or x.n_escapes or any(x.codebook) or not 12 <= s0 <= 64 * MIB:
                corrupt("R29", "ARCHIVE record")
        else:
            if x.n_escapes or any(x.codebook):
                corrupt("R25", "n_escapes or codebook on a RAW/ZSTD extent")
            if x.enc == RAW and s0 != x.orig_size:
                corrupt("R25", "RAW plane0_size")
        return x

    def plane(self, x, p):
        off, size = x.planes[p]
        return self.data[off:off + size]

    # ---- chunks (§4.2, §5, §6) ----

    def chunk(self, x, c):
        """The original bytes of chunk c of extent x, or Reject("chunk", ...)."""
        start = c * x.chunk_size
        n = min(x.chunk_size, x.orig_size - start)
        datum, want = x.index[c]
        if x.enc == RAW:
            out = self.plane(x, 0)[start:start + n]
        elif x.enc == ZSTD:
            end = x.index[c + 1][0] if c + 1 < x.n_chunks else x.planes[0][1]
            out = zstd_chunk(self.plane(x, 0)[datum:end], n)
        elif x.enc == ARCHIVE:
            end = x.index[c + 1][0] if c + 1 < x.n_chunks else x.planes[1][1]
            if end - datum > 64 + 5 * (n // 2) + 16:
                raise Reject("chunk", "R48", "stream longer than its bound")
            out = ans_chunk(x.tables, self.plane(x, 1)[datum:end], start // 2, n // 2)
        else:
            end = x.index[c + 1][0] if c + 1 < x.n_chunks else x.n_escapes
            out = bf16_chunk(x, self.plane(x, 0), self.plane(x, 1), self.plane(x, 2),
                             start // 2, n // 2, datum, end)
        if xxh3(out) != want:
            raise Reject("chunk", "R43", "chunk hash")
        return out

    def read_all(self):
        """(original bytes, None) or (None, the first Reject)."""
        parts = []
        try:
            for x in self.extents:
                for c in range(x.n_chunks):
                    parts.append(self.chunk(x, c))
        except Reject as e:
            return None, e
        out = b"".join(parts)
        if hashlib.sha256(out).digest() != self.sha256:
            return None, Reject("corrupt", "R45", "SHA-256 of the original bytes")
        return out, None


def zstd_chunk(frame, n):
    """One frame of §6.1's profile decoding to n bytes."""
    if len(frame) > zstd_bound(n):
        raise Reject("chunk", "R47", "frame over the bound")
    if len(frame) < 6 or frame[:4] != b"\x28\xb5\x2f\xfd":
        raise Reject("chunk", "R44", "not a zstd frame (skippable or other magic)")
    fhd = frame[4]
    single, reserved, did_flag, fcs_flag = fhd >> 5 & 1, fhd >> 3 & 1, fhd & 3, fhd >> 6
    if reserved:
        raise Reject("chunk", "R40", "reserved bit of the frame header set")
    pos = 5
    window = 0
    if not single:
        wd = frame[5]
        base = 1 << (10 + (wd >> 3))
        window = base + base // 8 * (wd & 7)
        pos = 6
    did_len = (0, 1, 2, 4)[did_flag]
    fcs_len = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if len(frame) < pos + did_len + fcs_len:
        raise Reject("chunk", "R40", "frame header cut short")
    did = int.from_bytes(frame[pos:pos + did_len], "little")
    fcs = int.from_bytes(frame[pos + did_len:pos + did_len + fcs_len], "little") + (256 if fcs_len == 2 else 0)
    if single:
        window = fcs
    if did:
        raise Reject("chunk", "R44", "a dictionary id")
    if window > 16 * MIB:
        raise Reject("chunk", "R44", "window over 16 MiB")
    if seq_modes_reserved(frame, pos + did_len + fcs_len):
        raise Reject("chunk", "R44", "reserved bits of a Symbol_Compression_Modes byte set")
    d = zstandard.ZstdDecompressor().decompressobj()
    try:
        out = d.decompress(frame)
    except zstandard.ZstdError as e:
        raise Reject("chunk", "R40", "zstd: %s" % e)
    if not d.eof:
        raise Reject("chunk", "R40", "frame cut short")
    if d.unused_data:
        raise Reject("chunk", "R44", "bytes after the frame")
    if len(out) != n:
        raise Reject("chunk", "R41", "decoded %d bytes, not %d" % (len(out), n))
    return out


def seq_modes_at(frame, pos):
    """Offsets of the Symbol_Compression_Modes bytes of the frame's compressed
    blocks (RFC 8878 3.1.1.2, 3.1.1.3), the blocks starting at pos; a malformed
    frame ends the walk (the decoder refuses it)."""
    out = []
    while pos + 3 <= len(frame):
        bh = int.from_bytes(frame[pos:pos + 3], "little")
        last, btype, size = bh & 1, bh >> 1 & 3, bh >> 3
        pos += 3
        b = frame[pos:pos + size]
        if btype == 2 and len(b) == size and size:
            lbt, sf = b[0] & 3, b[0] >> 2 & 3
            if lbt < 2:
                lh = {1: 2, 3: 3}.get(sf, 1)
                v = int.from_bytes(b[:lh], "little")
                regen = v >> 3 if lh == 1 else v >> 4
                lsize = regen if lbt == 0 else 1
            else:
                lh, width = {0: (3, 10), 1: (3, 10), 2: (4, 14), 3: (5, 18)}[sf]
                lsize = int.from_bytes(b[:lh], "little") >> (4 + width) & ((1 << width) - 1)
            at = lh + lsize
            if at < size and b[at]:
                hdr = 1 if b[at] < 128 else 2 if b[at] < 255 else 3
                if at + hdr < size:
                    out.append(pos + at + hdr)
        if last or btype == 3:
            break
        pos += 1 if btype == 1 else size
    return out


def seq_modes_reserved(frame, pos):
    return any(frame[o] & 3 for o in seq_modes_at(frame, pos))


def bits(plane, pos, width):
    """width bits at stream bit pos (LSB-first, §1); bytes past the plane read as 0."""
    b = pos >> 3
    v = plane[b] | (plane[b + 1] << 8 if b + 1 < len(plane) else 0)
    return v >> (pos & 7) & ((1 << width) - 1)


def bf16_chunk(x, codes, low, esc, w0, nw, e0, e1):
    """Weights w0 .. w0+nw-1 of a K15/BSPLIT extent whose escapes are e0 .. e1-1 (§5.2)."""
    if e1 - e0 > nw:
        raise Reject("chunk", "R46", "more escapes than weights")
    k15 = x.enc == K15
    cs = [codes[i >> 1] >> (4 * (i & 1)) & 15 for i in range(w0, w0 + nw)]
    if cs.count(15) != e1 - e0:
        raise Reject("chunk", "R42", "codes 15 are not the escape count")
    out = bytearray()
    k = e0
    for j, c in enumerate(cs):
        i = w0 + j
        if c < 15:
            sym = x.codebook[c]
        else:
            sym = bits(esc, 9 * k, 9) if k15 else esc[k]
            k += 1
        w = (sym << 7 | bits(low, 7 * i, 7)) if k15 else (sym << 8 | low[i])
        out += struct.pack("<H", w)
    return bytes(out)


# ---- ARCHIVE (§5.3) ---------------------------------------------------------------

def ans_tables(b, n):
    """The tables of §5.3.1 from plane 0 of an ARCHIVE extent of n weights."""
    def bad(why):
        corrupt("R29", why)
    if len(b) < 12:
        bad("tables shorter than 12 bytes")
    mode, m, k, axis, c, a, res = struct.unpack_from("<BBBBIHH", b, 0)
    if mode == 0:
        if len(b) != 12 or any(b[1:]):
            bad("RAW tables")
        return {"mode": 0}
    if mode != 1 or m > 4 or not 1 <= k <= 16 or axis > 1 or res or not 1 <= a <= 256:
        bad("table header")
    if k == 1 and (c or axis):
        bad("C or axis without classes")
    if k > 1 and (c < 1 or n % c):
        bad("C")
    pos = [12]

    def take(size):
        if pos[0] + size > len(b):
            bad("tables end early")
        pos[0] += size
        return b[pos[0] - size:pos[0]]

    def varint():
        b0 = take(1)[0]
        if b0 < 0x80:
            return b0
        b1 = take(1)[0]
        if not 1 <= b1 <= 0x7F:
            bad("varint")
        return (b0 & 0x7F) | b1 << 7

    def table(count, total):
        f = [varint() for _ in range(count)]
        if any(v > total for v in f) or sum(f) != total:
            bad("a table does not sum to %d" % total)
        return f
    v = list(struct.unpack("<%dH" % a, take(2 * a)))
    if any(x >= 512 for x in v) or any(p >= q for p, q in zip(v, v[1:])):
        bad("symbol values")
    cmap = [0]
    if k > 1:
        width = 1 if k <= 2 else 2 if k <= 4 else 3 if k <= 8 else 4
        lines = c if axis == 0 else n // c
        raw = take((lines * width + 7) // 8)
        cmap = [bits(raw, l * width, width) for l in range(lines)]
        if any(x >= k for x in cmap):
            bad("a class >= K")
        if lines * width % 8 and raw[-1] >> (lines * width % 8):
            bad("class map padding")
    fe = [table(a, 4096) for _ in range(k)]
    fm = []
    for _ in range(a if m else 0):
        kind = take(1)[0]
        if kind > 1:
            bad("mantissa table kind")
        fm.append(table(1 << m, 256) if kind else [256 >> m] * (1 << m))
    if pos[0] != len(b):
        bad("bytes after the tables")
    return {"mode": 1, "m": m, "k": k, "axis": axis, "c": c, "v": v, "map": cmap, "fe": fe, "fm": fm}


def find(f, slot):
    """(index, cum) of the value whose slots hold slot (prefix sums in index order)."""
    cum = 0
    for i, x in enumerate(f):
        if slot < cum + x:
            return i, cum
        cum += x
    raise AssertionError("tables sum to their total")


def ans_chunk(t, s, first, n):
    """Weights first .. first+n-1 of an ARCHIVE extent from its stream s (§5.3.2)."""
    def bad(why):
        raise Reject("chunk", "R48", why)
    if t["mode"] == 0:
        if len(s) != 2 * n:
            bad("RAW stream length")
        return bytes(s)
    m = t["m"]
    lowbits = 7 - m
    low_len = (n * lowbits + 7) // 8
    if len(s) < 64 + low_len or (len(s) - 64 - low_len) % 2:
        bad("stream length")
    x = list(struct.unpack_from("<16I", s, 0))
    if any(not (1 << 15) <= v < 1 << 31 for v in x):
        bad("initial state")
    low = s[64:64 + low_len]
    if n * lowbits % 8 and low[-1] >> (n * lowbits % 8):
        bad("low bits padding")
    words = s[64 + low_len:]
    nw, pos = len(words) // 2, 0

    def step(l, f, bits_):
        nonlocal pos
        slot = x[l] & ((1 << bits_) - 1)
        idx, cum = find(f, slot)
        x[l] = f[idx] * (x[l] >> bits_) + slot - cum
        if x[l] < 1 << 15:
            if pos >= nw:
                bad("a word past the end")
            x[l] = (x[l] << 16) | words[2 * pos] | words[2 * pos + 1] << 8
            pos += 1
        return idx

    def cls(i):
        if t["k"] == 1:
            return 0
        return t["map"][i % t["c"] if t["axis"] == 0 else i // t["c"]]
    out = bytearray()
    for g in range(0, n, 16):
        r = min(16, n - g)
        a = [step(l, t["fe"][cls(first + g + l)], 12) for l in range(r)]
        h = [step(l, t["fm"][a[l]], 8) if m else 0 for l in range(r)]
        for l in range(r):
            j = g + l
            w = t["v"][a[l]] << 7 | h[l] << lowbits | bits(low, j * lowbits, lowbits)
            out += struct.pack("<H", w)
    if pos != nw:
        bad("words left over")
    if any(v != 1 << 15 for v in x):
        bad("final state")
    return bytes(out)


# ---- the manifest (§7) ------------------------------------------------------------

def parse_manifest(b, links_out=None):
    """{path: entry} of files and {path: mode} of dirs, or Reject (R50, R53-R56);
    links_out (a dict), if given, gets {path: target} of the links (format 2)."""
    if len(b) > 1 << 30:
        corrupt("R56", "over 1 GiB")
    m = re.match(rb"CKPTFS-MANIFEST 1 ([0-9a-f]{16})\n", b)
    if not m:
        corrupt("R50", "first line")
    js = b[m.end():]
    if xxh3(js) != int(m.group(1), 16):
        corrupt("R50", "hash")
    try:
        text = js.decode("utf-8")  # strict: no surrogates, no overlong forms
    except UnicodeDecodeError:
        corrupt("R56", "not UTF-8")
    if text.startswith("\ufeff"):
        corrupt("R56", "byte order mark")

    def pairs(p):
        names = [k for k, _ in p]
        if len(set(names)) != len(names):
            corrupt("R56", "a member name twice")
        return dict(p)

    def constant(c):
        raise ValueError("%s is not JSON" % c)

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20000))
    try:
        doc = json.loads(text, object_pairs_hook=pairs, parse_int=float, parse_constant=constant)
    except (ValueError, RecursionError) as e:
        corrupt("R56", "invalid JSON: %s" % e)
    finally:
        sys.setrecursionlimit(old)
    stack, deepest = [(doc, 1)], 0
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, depth)
            items = list(v.items()) if isinstance(v, dict) else [(None, e) for e in v]
            for k, e in items:
                for s in (k, e):
                    if isinstance(s, str):
                        if "\0" in s:
                            corrupt("R56", "a \\u0000 escape")
                        try:
                            s.encode("utf-8")
                        except UnicodeEncodeError:
                            corrupt("R56", "a lone surrogate escape")
                stack.append((e, depth + 1))
    if deepest > 1000:
        corrupt("R56", "nested %d deep" % deepest)
    if not isinstance(doc, dict):
        corrupt("R56", "not an object")
    fmt = doc.get("format")
    if not isinstance(fmt, float):
        corrupt("R56", "format missing or not a number")
    if fmt not in (1, 2):
        raise Reject("unsupported", "R53", "format %r" % fmt)
    if not isinstance(doc.get("files"), list) or not isinstance(doc.get("dirs"), list):
        corrupt("R56", "files or dirs not an array")
    if fmt == 2 and not isinstance(doc.get("links"), list):  # format 1: an unknown key
        corrupt("R56", "links not an array")

    def number(e, k, hi):
        v = e.get(k)
        if not isinstance(v, float) or not 0 <= v <= hi or v != int(v):
            corrupt("R54", "%s %r" % (k, v))
        return int(v)

    def path_of(e, is_file):
        p = e.get("path")
        if not isinstance(p, str):
            corrupt("R54", "path missing or not a string")
        why = path_problem(p.encode("utf-8"), is_file)
        if why:
            corrupt("R54", "path %r: %s" % (p, why))
        return p.encode("utf-8")

    files, dirs = {}, {}
    fpaths, dpaths = [], []
    for e in doc["files"]:
        if not isinstance(e, dict):
            corrupt("R54", "a file entry that is not an object")
        p = path_of(e, True)
        size = number(e, "size", 1 << 53)
        sha = e.get("sha256")
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
            corrupt("R54", "sha256")
        mode = number(e, "mode", 0o7777)
        t = e.get("mtime_ns")
        if not isinstance(t, str) or not re.fullmatch(r"-?[0-9]{1,19}", t) or not -2 ** 63 <= int(t) < 2 ** 63:
            corrupt("R54", "mtime_ns")
        if e.get("kind") not in ("safetensors", "blob"):
            corrupt("R54", "kind")
        fpaths.append(p)
        files[p] = dict(size=size, sha256=bytes.fromhex(sha), mode=mode, mtime_ns=int(t), kind=e["kind"])
    for e in doc["dirs"]:
        if not isinstance(e, dict):
            corrupt("R54", "a directory entry that is not an object")
        p = path_of(e, False)
        dirs[p] = number(e, "mode", 0o7777)
        dpaths.append(p)
    links, lpaths = {}, []
    for e in doc["links"] if fmt == 2 else []:
        if not isinstance(e, dict):
            corrupt("R54", "a link entry that is not an object")
        p = path_of(e, False)
        t = e.get("target")
        if not isinstance(t, str) or not 1 <= len(t.encode("utf-8")) <= 4095:
            corrupt("R54", "link target %r" % (t,))
        links[p] = t.encode("utf-8")
        lpaths.append(p)
    if len(files) != len(fpaths) or len(dirs) != len(dpaths) or len(links) != len(lpaths):
        corrupt("R55", "a duplicate path")
    if set(files) & set(dirs) or set(links) & (set(files) | set(dirs)):
        corrupt("R55", "a path that is two of a file, a directory and a link")
    if links_out is not None:
        links_out.update(links)
    for p in fpaths + dpaths + lpaths:
        if b"/" in p and p.rsplit(b"/", 1)[0] not in dirs:
            corrupt("R55", "parent of %r not listed" % p)
    return files, dirs


# ---- a packed directory (§2) ------------------------------------------------------

def open_regular(dst, rel):
    """The bytes of DST/rel, reached without following a link below DST (§2, R51)."""
    parts = rel.split(b"/")
    p = os.fsencode(dst)
    for i, c in enumerate(parts):
        p = os.path.join(p, c)
        try:
            st = os.lstat(p)
        except OSError as e:
            raise Reject("io", "R51", "%r: %s" % (rel, e.strerror))
        ok = stat.S_ISREG(st.st_mode) if i == len(parts) - 1 else stat.S_ISDIR(st.st_mode)
        if not ok:  # never opened: a FIFO would wait for a writer
            raise Reject("not-ckptfs", "R51", "%r: a link, or not a regular file / directory" % rel)
    with open(p, "rb") as f:
        return f.read()


def read_links(dst):
    """{path: target} of the links the manifest lists (§7), or Reject."""
    links = {}
    parse_manifest(open_regular(dst, b"ckptfs.manifest"), links)
    return links


def read_pack(dst):
    """{path: original bytes} of every listed file, or the first Reject."""
    files, _ = parse_manifest(open_regular(dst, b"ckptfs.manifest"))
    out = {}
    for rel in sorted(files):
        e = files[rel]
        pk = Packed(open_regular(dst, rel + b".ckpt"))
        if pk.path != rel:
            corrupt("R30", "TOC path %r for %r" % (pk.path, rel))
        if pk.original_size != e["size"] or pk.sha256 != e["sha256"]:
            corrupt("R52", "size or SHA-256 differ from the TOC's")
        data, err = pk.read_all()
        if err:
            raise err
        out[rel] = data
    return out
