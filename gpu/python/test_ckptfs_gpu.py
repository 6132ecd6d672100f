"""Test of the ckptfs_gpu binding: pack a small model with the CLI, list its
tensors through libckgpu; with a GPU and torch, load them to torch (decode of
packed tensors, zero-copy views of raw ones) and check bytes and GEMV.

usage: test_ckptfs_gpu.py LIBCKGPU CKPTFS_BINARY WORKDIR
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_gpu as cg  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "lib"))
from format_dtypes import format_dtypes, write_every_dtype  # noqa: E402


def bf16(f):
    u = struct.unpack("<I", struct.pack("<f", f))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


class _NoCalls:
    """A library whose every function fails the test: argument checks must
    reject before anything reaches the C side."""
    def __getattr__(self, name):
        raise AssertionError(f"{name} called with arguments the binding should have rejected")


def check_gemv_arguments(torch, model, info):
    """gemv() rejects x of the wrong shape or on another device than the
    tensor's (no device needed: a DeviceTensor without a handle, on cuda:0
    or the meta device, whose tensors have shapes but no data)."""
    for dev, x, what in ((torch.device("cuda", 0), torch.zeros(1024, dtype=torch.bfloat16), "a CPU x"),
                         (torch.device("meta"), torch.empty(1000, device="meta"), "x of 1000 columns"),
                         (torch.device("meta"), torch.empty(9, 1024, device="meta"), "a batch of 9"),
                         (torch.device("meta"), torch.empty(2, 2, 1024, device="meta"), "a 3-d x")):
        t = object.__new__(cg.DeviceTensor)
        t._lib, t._h, t.info, t.rows, t.cols, t.device = _NoCalls(), None, info, 24, 1024, dev
        try:
            t.gemv(x)
        except ValueError:
            continue
        raise AssertionError(f"gemv accepted {what}")
    print("gpu_python: gemv rejects x of the wrong shape or device")


def check_dtype_names(ckptfs, work):
    """Every dtype of docs/format.md §4.3, packed, is listed by its name and
    code (no GPU needed)."""
    src, dst = os.path.join(work, "dtypes"), os.path.join(work, "dtypes-packed")
    os.makedirs(src)
    tensors = write_every_dtype(os.path.join(src, "all.safetensors"))
    subprocess.run([ckptfs, "pack", src, dst], check=True, stdout=subprocess.DEVNULL)
    codes = {n: c for c, n in format_dtypes().items()}
    with cg.Model(dst) as m:
        infos = m.tensors()
    got = {t.name: (t.dtype, t.dtype_code, list(t.shape), t.nbytes) for t in infos}
    want = {k: (dt, codes[dt], shape, len(data)) for k, (dt, shape, data) in tensors.items()}
    assert got == want, [(k, got.get(k), want.get(k)) for k in sorted(set(got) | set(want)) if got.get(k) != want.get(k)]
    # the zero-copy view of a raw tensor describes its bytes: shape times the
    # element size is nbytes (a DeviceTensor without a device, as above)
    for info in infos:
        t = object.__new__(cg.DeviceTensor)
        t._lib, t._h, t.info, t.packed, t.nbytes = _NoData(), None, info, False, info.nbytes
        t.shape = info.shape
        cai = t.__cuda_array_interface__
        n = 1
        for d in cai["shape"]:
            n *= d
        assert n * int(cai["typestr"][2:]) == info.nbytes, (info.name, cai)
    print(f"gpu_python: the {len(want)} dtypes of the format listed by name, their array interfaces right")


def check_uploads_serialized(dst):
    """Model.load from several threads: ckg_tensor_upload (not thread-safe
    per model: its staging buffers are the model's) never runs twice at once
    for one model.  A library that records overlapping uploads stands in for
    libckgpu's upload (no GPU needed)."""
    import threading
    import time

    class Uploads:
        def __init__(self, lib):
            self.lib, self.inside, self.overlaps, self.lock = lib, 0, 0, threading.Lock()

        def __getattr__(self, name):
            return getattr(self.lib, name)

        def ckg_tensor_upload(self, h, i, r0, r1, flags, stream, out):
            with self.lock:
                self.inside += 1
                self.overlaps += self.inside > 1
            time.sleep(0.002)
            with self.lock:
                self.inside -= 1
            out._obj.value = 1
            return 0

        def ckg_tensor_is_packed(self, t):
            return 0

        def ckg_tensor_nbytes(self, t):
            return 0

        def ckg_tensor_device_bytes(self, t):
            return 0

        def ckg_tensor_free(self, t):
            pass

    with cg.Model(dst) as m:
        lib = m._lib
        m._lib = fake = Uploads(lib)
        names = [t.name for t in m.tensors()]
        ts = [threading.Thread(target=lambda: [m.load(n) for n in names * 5]) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        m._lib = lib
    assert fake.overlaps == 0, f"{fake.overlaps} uploads ran while another one of the same model did"
    print("gpu_python: uploads of one model from 4 threads run one at a time")


def check_generic_gemv_warns_once(torch, info):
    """gemv() on a tensor whose GEMV falls to the generic kernel (here: a
    library that says its columns are not a multiple of 32) warns once,
    naming the tensor and the reason, and not again on later calls."""
    import warnings

    class Path:
        calls = 0

        def ckg_tensor_gemv_path(self, h, x):
            Path.calls += 1
            return 1

        def ckg_tensor_gemv(self, *args):
            return 0

    t = object.__new__(cg.DeviceTensor)
    t._lib, t._h, t.info, t.rows, t.cols, t.device = Path(), None, info, 10, 300, None
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            try:
                t.gemv(torch.zeros(2, 300, dtype=torch.bfloat16))
            except (RuntimeError, AssertionError):
                pass   # no CUDA here: the call stops at the stream, after the check
    msgs = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and info.name in msgs[0] and "not a multiple of 32" in msgs[0], msgs
    assert Path.calls == 1, Path.calls
    print("gpu_python: a GEMV on the generic kernel warns once:", msgs[0])


class _NoData:
    def ckg_tensor_data(self, h):
        return 0


def main():
    lib, ckptfs, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    src, dst = os.path.join(work, "src"), os.path.join(work, "packed")
    os.makedirs(src)
    rng = random.Random(7)
    tensors = {  # name: (dtype, shape, bytes)
        "w": ("BF16", [24, 1024], struct.pack("<%dH" % (24 * 1024), *[bf16(rng.gauss(0, 0.02)) for _ in range(24 * 1024)])),
        "v": ("BF16", [10, 300], struct.pack("<%dH" % 3000, *[bf16(rng.gauss(0, 0.02)) for _ in range(3000)])),
        "b": ("F32", [24], struct.pack("<24f", *[rng.random() for _ in range(24)])),
    }
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for k, (dt, shape, data) in tensors.items():
        header[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    hj = json.dumps(header).encode()
    hj += b" " * (-len(hj) % 8)
    with open(os.path.join(src, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + b"".join(d for _, _, d in tensors.values()))
    subprocess.run([ckptfs, "pack", "--format", "k15", src, dst], check=True, stdout=subprocess.DEVNULL)

    cg.load_library(lib)
    check_dtype_names(ckptfs, work)
    check_uploads_serialized(dst)
    with cg.Model(dst) as m:
        infos = {t.name: t for t in m.tensors()}
        assert set(infos) == set(tensors), infos
        for k, (dt, shape, data) in tensors.items():
            i = infos[k]
            assert i.dtype == dt and list(i.shape) == shape and i.nbytes == len(data), i
        assert infos["w"].encoding == "k15" and infos["b"].encoding in ("raw", "zstd")
        print("gpu_python: listed", sorted(infos.values(), key=lambda t: t.name))
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            check_gemv_arguments(torch, m, infos["w"])
            check_generic_gemv_warns_once(torch, infos["v"])
        if cg.device_count() == 0 or torch is None or not torch.cuda.is_available():
            print("SKIP device part: no CUDA device" + ("" if torch else " (or no torch)"))
            return 0
        for k, (dt, shape, data) in tensors.items():
            t = m.to_torch(k)
            got = t.contiguous().view(torch.uint8).cpu().numpy().tobytes()
            assert got == data, f"{k}: bytes differ"
        rows = m.to_torch("w", rows=(5, 17))
        ref = torch.frombuffer(bytearray(tensors["w"][2]), dtype=torch.int16).view(torch.bfloat16).reshape(24, 1024)
        assert torch.equal(rows.cpu(), ref[5:17]), "row range differs"
        w = m.load("w")
        x = torch.randn(3, 1024, device="cuda").to(torch.bfloat16)
        y = w.gemv(x)
        yr = (x.double() @ ref.cuda().double().T)
        tol = (x.double().abs() @ ref.cuda().double().abs().T) * 2.0 ** -14 + 1e-30
        assert bool(((y.double() - yr).abs() <= tol).all()), "gemv outside tolerance"
        # on a side stream, once that stream is waited for (x, a float32 input, becomes a
        # temporary bf16 copy that record_stream keeps alive there)
        side = torch.cuda.Stream()
        for _ in range(20):
            ys = w.gemv(x.float(), stream=side)
            ds = w.decode(stream=side)
            torch.cuda.current_stream().wait_stream(side)
            assert bool(((ys.double() - yr).abs() <= tol).all()), "side-stream gemv outside tolerance"
            assert torch.equal(ds.cpu(), ref), "side-stream decode differs"
        print("gpu_python: device decode, zero-copy raw view, row range, gemv ok (also on a side stream)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
