"""ckptfs_gpu — a thin ctypes binding of libckgpu (gpu/ckgpu.h).

    import ckptfs_gpu as cg
    m = cg.Model("/models/llama-packed")            # a packed directory
    for t in m.tensors(): print(t.name, t.dtype, t.shape, t.encoding)
    w = m.load("model.layers.0.mlp.down_proj.weight")   # packed planes on the GPU
    W = w.decode()                                    # torch.bfloat16 tensor, decoded on the GPU
    y = w.gemv(x)                                     # fused decode + GEMV, x [batch<=8, cols] bf16
    b = m.load("model.norm.weight").to_torch()        # non-packed: zero-copy view of the loader's buffer

The library is found through $CKPTFS_GPU_LIB, the `lib` argument, or next to
this file / in ../../build/gpu.  Importing this module needs no GPU and no
torch; device calls need both.  Errors raise CkgError with the status name.
"""
import ctypes as C
import os
import threading
import warnings

__all__ = ["CkgError", "Model", "DeviceTensor", "TensorInfo", "load_library", "device_count"]

# dtype code (docs/format.md §4.3) -> safetensors name; other codes show as their number
_DTYPES = {1: "BOOL", 2: "U8", 3: "I8", 4: "I16", 5: "U16", 6: "F16", 7: "BF16", 8: "I32", 9: "U32",
           10: "F32", 11: "F64", 12: "I64", 13: "U64", 14: "F8_E5M2", 15: "F8_E4M3", 16: "F8_E8M0",
           17: "F4", 18: "F6_E2M3", 19: "F6_E3M2", 20: "C64", 21: "F8_E4M3FNUZ", 22: "F8_E5M2FNUZ"}
_ENCODINGS = {0: "raw", 1: "zstd", 2: "k15", 3: "bytesplit", 4: "archive"}
# dtype code -> (__cuda_array_interface__ typestr, torch dtype name to view as, or None);
# F4 and F6 (17-19), less than a byte an element, are bytes (|u1, shape (nbytes,))
_CAI = {1: ("|b1", None), 2: ("|u1", None), 3: ("|i1", None), 4: ("<i2", None), 5: ("<u2", None),
        6: ("<f2", None), 7: ("<i2", "bfloat16"), 8: ("<i4", None), 9: ("<u4", None), 10: ("<f4", None),
        11: ("<f8", None), 12: ("<i8", None), 13: ("<u8", None), 14: ("|u1", "float8_e5m2"),
        15: ("|u1", "float8_e4m3fn"), 16: ("|u1", "float8_e8m0fnu"), 20: ("<c8", None),
        21: ("|u1", "float8_e4m3fnuz"), 22: ("|u1", "float8_e5m2fnuz")}
_ELEM = {1: 1, 2: 1, 3: 1, 4: 2, 5: 2, 6: 2, 7: 2, 8: 4, 9: 4, 10: 4, 11: 8, 12: 8, 13: 8, 14: 1, 15: 1, 16: 1,
         20: 8, 21: 1, 22: 1}

NO_VERIFY = 1
DECODED = 2
OUT_F32, OUT_BF16 = 0, 1


class CkgError(RuntimeError):
    def __init__(self, status, what, lib):
        self.status = status
        name = lib.ckg_status_name(status).decode()
        super().__init__(f"{what}: {name} ({status})")


class _Info(C.Structure):
    _fields_ = [("name", C.c_char_p), ("file", C.c_char_p), ("dtype", C.c_uint32), ("encoding", C.c_uint32),
                ("ndim", C.c_uint32), ("shape", C.c_uint64 * 16), ("nbytes", C.c_uint64)]


class TensorInfo:
    def __init__(self, index, info):
        self.index = index
        self.name = info.name.decode()
        self.file = info.file.decode()
        self.dtype_code = info.dtype
        self.dtype = _DTYPES.get(info.dtype, str(info.dtype))
        self.encoding = _ENCODINGS.get(info.encoding, str(info.encoding))
        self.shape = tuple(int(info.shape[d]) for d in range(info.ndim))
        self.nbytes = int(info.nbytes)

    def __repr__(self):
        return f"TensorInfo({self.name!r}, {self.dtype}, {self.shape}, {self.encoding}, {self.file!r})"


_lib = None


def open_cdll(name, env, build_dir, path=None):
    """The shared library `name`: from path, $env, beside this file, the
    build folder's build_dir, or the loader's search path, first found."""
    here = os.path.dirname(os.path.abspath(__file__))
    cands = [path, os.environ.get(env), os.path.join(here, name),
             os.path.join(here, "..", "..", "build", build_dir, name), name]
    err = None
    for c in cands:
        if not c:
            continue
        try:
            return C.CDLL(c)
        except OSError as e:
            err = e
    raise OSError(f"{name} not found (set {env}): {err}")


def load_library(path=None):
    """Load libckgpu once; later calls return the same handle."""
    global _lib
    if _lib is not None:
        return _lib
    lib = open_cdll("libckgpu.so", "CKPTFS_GPU_LIB", "gpu", path)
    P, U64, I, S = C.c_void_p, C.c_uint64, C.c_int, C.c_int
    sigs = {
        "ckg_status_name": (C.c_char_p, [S]),
        "ckg_device_count": (I, []),
        "ckg_model_open": (S, [C.c_char_p, C.POINTER(P), C.c_char_p, C.c_size_t]),
        "ckg_model_close": (None, [P]),
        "ckg_model_count": (C.c_size_t, [P]),
        "ckg_model_info": (C.POINTER(_Info), [P, C.c_size_t]),
        "ckg_model_find": (S, [P, C.c_char_p, C.POINTER(C.c_size_t)]),
        "ckg_tensor_upload": (S, [P, C.c_size_t, U64, U64, C.c_uint, P, C.POINTER(P)]),
        "ckg_tensor_free": (None, [P]),
        "ckg_tensor_is_packed": (I, [P]),
        "ckg_tensor_data": (P, [P]),
        "ckg_tensor_nbytes": (U64, [P]),
        "ckg_tensor_device_bytes": (U64, [P]),
        "ckg_tensor_rows": (U64, [P]),
        "ckg_tensor_cols": (U64, [P]),
        "ckg_tensor_decode": (S, [P, P, C.c_size_t, P]),
        "ckg_tensor_gemv": (S, [P, P, I, P, I, P]),
        "ckg_tensor_gemv_path": (I, [P, P]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    _lib = lib
    return lib


# ckgpu.h's ckg_gemv_path: why a GEMV runs on the generic kernel
_GENERIC_GEMV = {
    1: "its column count is not a multiple of 32 (or is over 65536)",
    2: "its first weight is not a multiple of 32 weights into the planes",
    3: "no escape patch list covers its rows",
    4: "its planes, x or patch list are not 16-byte aligned",
}

_ndev = None


def device_count(lib=None, refresh=False):
    """CUDA devices libckgpu sees; asked once (a server asks per layer it loads), refresh=True asks again."""
    global _ndev
    if _ndev is None or refresh:
        _ndev = load_library(lib).ckg_device_count()
    return _ndev


def _stream(torch, stream, device=None):
    """(handle, other) for a call enqueued on stream (None: the current one;
    a torch.cuda.Stream, or a raw cudaStream_t as an int): handle is the raw
    stream, other the torch stream object when it is not the current stream.
    Then other first waits for the current stream's work (the inputs were
    made there), and the caller marks every torch tensor the call uses with
    record_stream(other): without it, a tensor freed on the current stream
    (the temporaries here, or the caller's) could be handed to a new
    allocation while the kernel on other still reads or writes it."""
    cur = torch.cuda.current_stream(device)
    if stream is None:
        return cur.cuda_stream, None
    if not hasattr(stream, "cuda_stream"):
        if int(stream) == cur.cuda_stream:
            return cur.cuda_stream, None
        stream = torch.cuda.ExternalStream(int(stream), device=device)
    if stream.cuda_stream == cur.cuda_stream:
        return cur.cuda_stream, None
    stream.wait_stream(cur)
    return stream.cuda_stream, stream


def _keep(other, *tensors):
    """record_stream(other) on each tensor a call on another stream uses."""
    if other is not None:
        for t in tensors:
            t.record_stream(other)


class _Handle:
    """Owns one C handle (self._h); close() frees it with the library
    function named by _free, once; garbage collection closes too."""
    _free = None

    def close(self):
        if self._h:
            getattr(self._lib, self._free)(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class DeviceTensor(_Handle):
    """Rows [row_begin, row_end) of a tensor on the CUDA device that was
    current at upload (self.device); every later call runs on that device,
    whichever is current then."""
    _free = "ckg_tensor_free"

    def __init__(self, model, info, handle, row_begin, row_end, device=None):
        self._lib, self._model, self._h = model._lib, model, handle  # the model outlives us
        self.info = info
        self.device = device
        self.rows = row_end - row_begin
        self.shape = (self.rows,) + info.shape[1:] if info.shape else ()
        self.cols = 1
        for d in info.shape[1:]:
            self.cols *= d
        self.packed = bool(self._lib.ckg_tensor_is_packed(handle))
        self.nbytes = int(self._lib.ckg_tensor_nbytes(handle))
        self.device_bytes = int(self._lib.ckg_tensor_device_bytes(handle))


    @property
    def __cuda_array_interface__(self):
        """Raw (non-packed) tensors only: the loader's device buffer, no copy."""
        if self.packed:
            raise TypeError(f"{self.info.name} is packed on the device: use decode()")
        typestr, _ = _CAI.get(self.info.dtype_code, ("|u1", None))
        shape = self.shape if self.info.dtype_code in _ELEM else (self.nbytes,)
        return {"shape": tuple(shape), "typestr": typestr, "data": (self._lib.ckg_tensor_data(self._h) or 0, False),
                "version": 3, "strides": None}

    def _on_device(self, torch):
        """A context making self.device current (a no-op without one)."""
        import contextlib
        return torch.cuda.device(self.device) if self.device is not None else contextlib.nullcontext()

    def to_torch(self):
        """A torch view of a raw tensor's device buffer (zero copy; keeps self alive)."""
        import torch
        t = torch.as_tensor(self, device=self.device or "cuda")
        view = _CAI.get(self.info.dtype_code, (None, None))[1]
        if view and hasattr(torch, view):
            t = t.view(getattr(torch, view))
        t._ckptfs_owner = self  # the buffer lives as long as the torch tensor
        return t

    def decode(self, out=None, stream=None):
        """Decode to a new (or the given) torch tensor on the GPU, enqueued on
        stream (default: the current one; another one first waits for the
        current one, and the result is ready on it, not on the current one)."""
        import torch
        dev = self.device or "cuda"
        if out is None:
            if self.info.dtype == "BF16":
                out = torch.empty(self.shape, dtype=torch.bfloat16, device=dev)
            else:
                out = torch.empty(self.nbytes, dtype=torch.uint8, device=dev)
        if out.numel() * out.element_size() < self.nbytes or not out.is_contiguous():
            raise ValueError("out too small or not contiguous")
        if self.device is not None and out.device != self.device:
            raise ValueError(f"out is on {out.device}, {self.info.name} on {self.device}")
        with self._on_device(torch):
            handle, other = _stream(torch, stream, self.device)
            st = self._lib.ckg_tensor_decode(self._h, out.data_ptr(), out.numel() * out.element_size(), handle)
            _keep(other, out)
        if st:
            raise CkgError(st, f"decode {self.info.name}", self._lib)
        return out

    def gemv(self, x, out_dtype=None, stream=None):
        """y = x @ W.T for x [batch <= 8, cols] (or [cols]) BF16 on the GPU; returns [batch, rows].
        On another stream than the current one (stream=), as decode()."""
        import torch
        out_dtype = out_dtype or torch.float32
        if out_dtype not in (torch.bfloat16, torch.float32):
            raise ValueError("out_dtype must be float32 or bfloat16")
        if not isinstance(x, torch.Tensor):
            raise TypeError("x must be a torch tensor")
        if self.device is not None and x.device != self.device:
            raise ValueError(f"x is on {x.device}, {self.info.name} on {self.device}")
        if x.dim() not in (1, 2) or x.shape[-1] != self.cols or (x.dim() == 2 and not 1 <= x.shape[0] <= 8):
            raise ValueError(f"x must be [cols] or [batch 1..8, cols] with cols = {self.cols}, got {list(x.shape)}")
        squeeze = x.dim() == 1
        x = x.reshape(1, -1) if squeeze else x
        x = x.to(torch.bfloat16).contiguous()
        if not getattr(self, "_gemv_path_seen", False):   # once per tensor: say if it misses the fused kernel
            self._gemv_path_seen = True
            why = _GENERIC_GEMV.get(int(self._lib.ckg_tensor_gemv_path(self._h, x.data_ptr())))
            if why:
                warnings.warn(f"{self.info.name}: its GEMV ({self.rows} x {self.cols}) runs on libckgpu's generic "
                              f"kernel, several times slower than the fused one: {why}", RuntimeWarning, stacklevel=2)
        y = torch.empty((x.shape[0], self.rows), dtype=out_dtype, device=x.device)
        ot = OUT_BF16 if out_dtype == torch.bfloat16 else OUT_F32
        with self._on_device(torch):
            handle, other = _stream(torch, stream, self.device)
            st = self._lib.ckg_tensor_gemv(self._h, x.data_ptr(), x.shape[0], y.data_ptr(), ot, handle)
            _keep(other, x, y)   # x may be a temporary (the bf16 / contiguous copy)
        if st:
            raise CkgError(st, f"gemv {self.info.name}", self._lib)
        return y[0] if squeeze else y


class Model(_Handle):
    """A packed directory opened for loading to the GPU.  load() may be
    called from several threads: uploads run one at a time (libckgpu's
    staging buffers are the model's; ckg_tensor_upload is not thread-safe
    per model)."""
    _free = "ckg_model_close"

    def __init__(self, packed_dir, lib=None):
        self._upload_lock = threading.Lock()
        self._lib = load_library(lib)
        h = C.c_void_p()
        err = C.create_string_buffer(1024)
        st = self._lib.ckg_model_open(os.fsencode(packed_dir), C.byref(h), err, len(err))
        if st:
            raise CkgError(st, f"open {packed_dir}: {err.value.decode(errors='replace')}", self._lib)
        self._h = h


    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def tensors(self):
        n = self._lib.ckg_model_count(self._h)
        return [TensorInfo(i, self._lib.ckg_model_info(self._h, i).contents) for i in range(n)]

    def info(self, name):
        i = C.c_size_t()
        st = self._lib.ckg_model_find(self._h, name.encode(), C.byref(i))
        if st:
            raise CkgError(st, name, self._lib)
        return TensorInfo(i.value, self._lib.ckg_model_info(self._h, i.value).contents)

    def load(self, name, rows=None, flags=0, stream=None):
        """Upload a tensor (rows=(begin, end) for a slice of its first dimension)."""
        info = self.info(name)
        nrows = info.shape[0] if info.shape else 1
        r0, r1 = rows if rows is not None else (0, nrows)
        device = None
        try:
            import torch
            if torch.cuda.is_available():
                device = torch.device("cuda", torch.cuda.current_device())
                if stream is None:
                    stream = torch.cuda.current_stream(device).cuda_stream
        except ImportError:
            pass
        out = C.c_void_p()
        with self._upload_lock:
            st = self._lib.ckg_tensor_upload(self._h, info.index, r0, r1, flags, stream, C.byref(out))
        if st:
            raise CkgError(st, f"upload {name}", self._lib)
        return DeviceTensor(self, info, out, r0, r1, device)

    def to_torch(self, name, rows=None):
        """Decoded torch tensor of a tensor (or rows of it) on the GPU."""
        t = self.load(name, rows)
        return t.decode() if t.packed else t.to_torch()
