"""st_write.py — write a safetensors file by hand, for test generators that
need exact control of the header (metadata, dtypes torch lacks)."""
import json
import struct


def write_safetensors(path, tensors, metadata=None):
    """tensors: (name, dtype, numpy array) in data order.  The header is
    json.dumps of the dict, padded with spaces to 8 bytes as the safetensors
    library does.  @return the size of the data buffer."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, arr in tensors:
        b = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    return off
