"""ckpt_layout.py — just enough of docs/format.md to find things to damage in
a packed file (header, TOC, extent records, chunk indexes), for the
hardening tests.  Reads only; the tests write the damage themselves."""
import struct

HEADER = 64
TOC_HEADER = 96
EXTENT = 192


class Extent:
    pass


def layout(path):
    with open(path, "rb") as f:
        b = f.read()
    toc_off, toc_size = struct.unpack_from("<QQ", b, 24)
    n = struct.unpack_from("<I", b, toc_off + 4)[0]
    strtab = toc_off + TOC_HEADER + n * EXTENT
    xs = []
    for i in range(n):
        r = toc_off + TOC_HEADER + i * EXTENT
        x = Extent()
        x.index = i
        x.rec = r
        x.orig_offset, x.orig_size, x.encoding, x.chunk_size, x.n_chunks, x.index_offset = \
            struct.unpack_from("<QQIIQQ", b, r)
        x.planes = [struct.unpack_from("<QQ", b, r + 48 + 16 * p) for p in range(3)]
        x.n_escapes = struct.unpack_from("<Q", b, r + 96)[0]
        noff, nlen = struct.unpack_from("<II", b, r + 136)
        x.name = b[strtab + noff:strtab + noff + nlen].decode()
        x.datums = [struct.unpack_from("<Q", b, x.index_offset + 16 * c)[0] for c in range(x.n_chunks)]
        xs.append(x)
    return {"size": len(b), "toc_offset": toc_off, "toc_size": toc_size, "extents": xs}


def chunk_bytes(x, c, plane):
    """(offset, length) in the packed file of the part of `plane` that chunk c
    of extent x uses (K15/BSPLIT/RAW), or None if it uses none of it."""
    k15 = x.encoding == 2
    if x.encoding == 0:
        off, size = x.planes[0]
        lo = c * x.chunk_size
        return off + lo, min(x.chunk_size, x.orig_size - lo)
    first = c * x.chunk_size // 2
    n = min(x.chunk_size, x.orig_size - c * x.chunk_size) // 2
    if plane == 0:
        return x.planes[0][0] + first // 2, (n + 1) // 2
    if plane == 1:
        if k15:
            return x.planes[1][0] + first * 7 // 8, n * 7 // 8
        return x.planes[1][0] + first, n
    e0 = x.datums[c]
    e1 = x.datums[c + 1] if c + 1 < x.n_chunks else x.n_escapes
    if e1 == e0:
        return None
    if k15:  # whole bytes holding only this chunk's escape bits
        a, z = (e0 * 9 + 7) // 8, (e1 * 9) // 8
        return (x.planes[2][0] + a, z - a) if z > a else None
    return x.planes[2][0] + e0, e1 - e0
