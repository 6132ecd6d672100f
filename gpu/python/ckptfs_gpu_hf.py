"""ckptfs_gpu_hf — serve a Hugging Face model from a packed directory.

    import ckptfs_gpu_hf as ckhf
    model = ckhf.from_pretrained("/models/llama-packed", device="cuda:0")
    tok = ckhf.load_tokenizer("/models/llama-packed")
    out = model.generate(**tok("Hello", return_tensors="pt").to("cuda:0"), max_new_tokens=32)

The model is the transformers model its config.json names, built without
allocating its weights, in which every nn.Linear whose weight is a packed
BF16 tensor (K15 or byte-split) becomes a PackedLinear:
  - on a GPU (libckgpu, ckptfs_gpu.py) the weight stays packed in VRAM;
    inputs of at most 8 rows (batch x sequence) go through the fused
    decode+GEMV; larger inputs decode the weight into one scratch buffer
    shared by every layer of the model and call torch's matmul (cuBLAS), so
    the extra memory is one layer's BF16 weight, never the model's;
  - on the CPU (libckread, fs/format/ckread.h: no CUDA) the weight stays packed
    in its file (the page cache) and every forward decodes it through the C
    codec into the shared scratch buffer, then calls torch's matmul, so the
    results are those of the original model bit for bit.
Embeddings, norms and every other tensor load as ordinary tensors (untied
embeddings can stay packed too: pack_embeddings=True); a Linear
whose weight is tied to another parameter (tie_word_embeddings) stays an
nn.Linear sharing that tensor.  Config and tokenizer files are read through
the format library, or from a directory the caller names (config_from=, e.g.
the `ckptfs mount` of the packed directory).

Tensor parallelism: load_linear(packed, name, rows=(begin, end)) or
(rank=, world_size=) loads a row slice of a weight (column-parallel layers:
rows are output features) through the loader's row-range upload.

The libraries are found through $CKPTFS_READ_LIB / $CKPTFS_GPU_LIB, the lib
arguments, or next to this file / the usual build folders.  Errors derive
from ServingError and say what was asked and what is missing; a tensor of
another shape than the model gives it is refused (ShapeMismatchError), as
transformers refuses it.
"""
import contextlib
import ctypes as C
import os
import shutil
import tempfile
import threading

import ckptfs_gpu as _cg  # the GPU binding beside this file: its library finder and tensor description

__all__ = ["ServingError", "NotAModelError", "MissingTensorError", "AmbiguousTensorError", "ShapeMismatchError", "DeviceError", "OutOfVRAMError",
           "PackedDir", "PackedWeight", "PackedLinear", "PackedEmbedding", "from_pretrained", "load_tokenizer", "load_linear", "row_slice",
           "load_read_library", "check_fits"]


class ServingError(RuntimeError):
    """Base of the errors of this module."""


class NotAModelError(ServingError):
    """The packed directory holds no Hugging Face model (no config.json)."""


class MissingTensorError(ServingError, KeyError):
    """The model needs a tensor the packed directory does not hold."""

    def __str__(self):  # KeyError would quote the message
        return self.args[0]


class AmbiguousTensorError(ServingError, KeyError):
    """Several safetensors files of the packed directory hold a tensor of the name asked for."""


class ShapeMismatchError(ServingError, ValueError):
    """A tensor of the packed directory has another shape than the model gives it."""


class DeviceError(ServingError, ValueError):
    """The device asked for is not one this module can load to."""


class OutOfVRAMError(ServingError, MemoryError):
    """Not enough free device memory; .needed and .free are in bytes."""

    def __init__(self, msg, needed, free):
        super().__init__(msg)
        self.needed, self.free = needed, free


# ---- libckread: the format library's host read API --------------------------------

# dtype code -> torch dtype of the same element size (one this torch lacks: read() refuses the
# tensor); F4 and F6 (17-19), less than a byte an element, have none
_TORCH_DTYPES = {1: "bool", 2: "uint8", 3: "int8", 4: "int16", 5: "uint16", 6: "float16", 7: "bfloat16",
                 8: "int32", 9: "uint32", 10: "float32", 11: "float64", 12: "int64", 13: "uint64",
                 14: "float8_e5m2", 15: "float8_e4m3fn", 16: "float8_e8m0fnu", 20: "complex64",
                 21: "float8_e4m3fnuz", 22: "float8_e5m2fnuz"}
PACKED_ENCODINGS = ("k15", "bytesplit")


class _Info(_cg._Info):
    """ckr_tensor_info: ckg_tensor_info's fields, then packed_bytes (ctypes
    appends a subclass's fields after its base's)."""
    _fields_ = [("packed_bytes", C.c_uint64)]


_rlib = None


def load_read_library(path=None):
    """Load libckread once; later calls return the same handle."""
    global _rlib
    if _rlib is not None:
        return _rlib
    lib = _cg.open_cdll("libckread.so", "CKPTFS_READ_LIB", os.path.join("fs", "format"), path)
    P, U64, S, SZ, ERR = C.c_void_p, C.c_uint64, C.c_int, C.c_size_t, C.c_char_p
    sigs = {
        "ckr_status_name": (C.c_char_p, [S]),
        "ckr_open": (S, [C.c_char_p, C.POINTER(P), ERR, SZ]),
        "ckr_close": (None, [P]),
        "ckr_count": (SZ, [P]),
        "ckr_info": (C.POINTER(_Info), [P, SZ]),
        "ckr_read_rows": (S, [P, SZ, U64, U64, P, SZ, ERR, SZ]),
        "ckr_file_count": (SZ, [P]),
        "ckr_file_path": (C.c_char_p, [P, SZ]),
        "ckr_file_size": (U64, [P, SZ]),
        "ckr_file_read": (S, [P, C.c_char_p, P, SZ, C.POINTER(U64), ERR, SZ]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    _rlib = lib
    return lib


class TensorInfo(_cg.TensorInfo):
    """ckptfs_gpu's tensor description, plus the bytes of its planes."""

    def __init__(self, index, info):
        super().__init__(index, info)
        self.packed_bytes = int(info.packed_bytes)

    @property
    def packed(self):
        """A BF16 tensor stored as K15/byte-split planes."""
        return self.dtype == "BF16" and self.encoding in PACKED_ENCODINGS


class PackedDir(_cg._Handle):
    """A packed directory opened through libckread: tensors and files."""
    _free = "ckr_close"
    _h = None  # until ckr_open succeeds

    def __init__(self, path, lib=None):
        self.path = os.fspath(path)
        self._lib = load_read_library(lib)
        h, err = C.c_void_p(), C.create_string_buffer(1024)
        st = self._lib.ckr_open(os.fsencode(self.path), C.byref(h), err, len(err))
        if st:
            raise ServingError(f"{self.path}: not a readable packed directory: "
                               f"{err.value.decode(errors='replace')} ({self._status(st)})")
        self._h = h
        n = self._lib.ckr_count(h)
        self.tensors = {}     # name -> its first tensor (files in path order), as ckr_find finds
        self.ambiguous = {}   # name -> the files holding a tensor of that name, where several do
        for i in range(n):
            t = TensorInfo(i, self._lib.ckr_info(h, i).contents)
            if t.name in self.tensors:
                self.ambiguous.setdefault(t.name, [self.tensors[t.name].file]).append(t.file)
                continue
            self.tensors[t.name] = t
        self.files = {self._lib.ckr_file_path(h, i).decode(): int(self._lib.ckr_file_size(h, i))
                      for i in range(self._lib.ckr_file_count(h))}

    def _status(self, st):
        return self._lib.ckr_status_name(st).decode()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def info(self, name):
        if name in self.ambiguous:
            files = self.ambiguous[name]
            raise AmbiguousTensorError(f"{self.path}: tensor {name} is in {len(files)} safetensors files "
                                       f"({', '.join(files)}): which one is meant is ambiguous")
        t = self.tensors.get(name)
        if t is None:
            raise MissingTensorError(f"{self.path}: no tensor {name} in the packed directory "
                                     f"({len(self.tensors)} tensors in {len({t.file for t in self.tensors.values()})} "
                                     f"safetensors files)")
        return t

    def read_rows_into(self, name, out, rows=None):
        """Decode rows [begin, end) of a tensor into out: a contiguous CPU torch
        tensor, or any object with data_ptr(), numel() and element_size() of
        a contiguous buffer in this process (no torch needed)."""
        t = self.info(name)
        dev = getattr(getattr(out, "device", None), "type", "cpu")
        if dev != "cpu" or not getattr(out, "is_contiguous", lambda: True)():
            # the bytes go to out's memory in order from its first element: a
            # strided view would get them in the wrong elements, a device
            # pointer would be written by the CPU
            raise ValueError(f"{self.path}: read {name}: out must be a contiguous CPU tensor, not "
                             f"{'a non-contiguous' if dev == 'cpu' else 'a ' + dev} one")
        r0, r1 = rows if rows is not None else (0, t.shape[0] if t.shape else 1)
        err = C.create_string_buffer(1024)
        cap = out.numel() * out.element_size()
        st = self._lib.ckr_read_rows(self._h, t.index, r0, r1, out.data_ptr(), cap, err, len(err))
        if st:
            raise ServingError(f"{self.path}: read {name}: {err.value.decode(errors='replace')} ({self._status(st)})")
        return out

    def read(self, name, rows=None):
        """A new CPU torch tensor holding (rows of) a tensor, decoded."""
        import torch
        t = self.info(name)
        nrows = t.shape[0] if t.shape else 1
        r0, r1 = rows if rows is not None else (0, nrows)
        # checked before the allocation (rows of another tensor could ask for
        # terabytes), and a 0-d tensor is its one row or nothing to return
        if not 0 <= r0 <= r1 <= nrows or (not t.shape and (r0, r1) != (0, 1)):
            raise ValueError(f"{self.path}: read {name}: rows [{r0}, {r1}) outside [0, {nrows})"
                             f"{'' if t.shape else ' (a 0-d tensor: its one row)'}")
        shape = ((r1 - r0),) + t.shape[1:] if t.shape else ()
        dt = _TORCH_DTYPES.get(t.dtype_code)
        if dt is None or not hasattr(torch, dt):
            raise ServingError(f"{self.path}: tensor {name} has dtype {t.dtype}, which torch cannot hold")
        out = torch.empty(shape, dtype=getattr(torch, dt))
        return self.read_rows_into(name, out, (r0, r1))

    def read_file(self, path):
        """The bytes of a non-tensor file of the directory (config.json, tokenizer.json...)."""
        size = self.files.get(path)
        if size is None:
            raise FileNotFoundError(f"{self.path}: no file {path} in the packed directory")
        buf = C.create_string_buffer(max(size, 1))
        got, err = C.c_uint64(), C.create_string_buffer(1024)
        st = self._lib.ckr_file_read(self._h, path.encode(), buf, len(buf), C.byref(got), err, len(err))
        if st:
            raise ServingError(f"{self.path}: read {path}: {err.value.decode(errors='replace')} ({self._status(st)})")
        return buf.raw[:got.value]


# ---- files: config and tokenizer ------------------------------------------------------

# Files of weights, which the skeleton does not read: older repositories keep
# pytorch_model*.bin (gigabytes) beside the safetensors shards, and each was
# read whole into memory and written to the temporary folder
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx", ".npz",
                    ".ot")


@contextlib.contextmanager
def _meta_files(packed, config_from):
    """A directory holding the model's non-tensor files: config_from itself,
    or a temporary copy of them read through the format library."""
    if config_from is not None:
        if not os.path.isfile(os.path.join(config_from, "config.json")):
            raise NotAModelError(f"{config_from}: no config.json: not a Hugging Face model directory")
        yield os.fspath(config_from)
        return
    if "config.json" not in packed.files:
        raise NotAModelError(f"{packed.path}: the packed directory has no config.json: not a Hugging Face model "
                             f"(files: {', '.join(sorted(packed.files)[:8])}"
                             f"{'...' if len(packed.files) > 8 else ''})")
    tmp = tempfile.mkdtemp(prefix="ckptfs-hf.")
    try:
        for rel in packed.files:
            if rel.endswith(_WEIGHT_SUFFIXES) or "/" in rel:
                continue
            with open(os.path.join(tmp, rel), "wb") as f:
                f.write(packed.read_file(rel))
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_tokenizer(packed_dir, config_from=None, **kw):
    """AutoTokenizer of the packed directory (its files read through the
    format library, or from config_from)."""
    from transformers import AutoTokenizer
    with PackedDir(packed_dir) as p, _meta_files(p, config_from) as d:
        return AutoTokenizer.from_pretrained(d, **kw)


# ---- devices ------------------------------------------------------------------------------

def _device(device):
    """torch.device for 'cpu' or 'cuda[:N]', else DeviceError."""
    import torch
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise DeviceError(f"device {device!r}: not a device name ({e})") from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise DeviceError(f"device {device!r}: packed weights load to 'cpu' or 'cuda[:N]' only")
    if not torch.cuda.is_available():
        raise DeviceError(f"device {device!r}: torch sees no CUDA device on this machine; use device='cpu'")
    n = torch.cuda.device_count()
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    if index >= n:
        raise DeviceError(f"device {device!r}: this machine has {n} CUDA device(s) (cuda:0..cuda:{n - 1})")
    import ckptfs_gpu
    if ckptfs_gpu.device_count() == 0:
        raise DeviceError(f"device {device!r}: libckgpu sees no CUDA device")
    return torch.device("cuda", index)


def _gib(n):
    return f"{n / 2**30:.2f} GiB"


def check_fits(needed, free, device, what):
    """Raise OutOfVRAMError when needed bytes exceed free bytes on device."""
    if needed > free:
        raise OutOfVRAMError(f"{what}: needs {_gib(needed)} ({needed} bytes) of device memory on {device}, "
                             f"{_gib(free)} free", needed, free)


def row_slice(n_rows, rank, world_size):
    """Rows [begin, end) of rank among world_size: even split, the first
    n_rows % world_size ranks one row more."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world size {world_size}")
    q, r = divmod(n_rows, world_size)
    begin = rank * q + min(rank, r)
    return begin, begin + q + (rank < r)


# ---- the module -----------------------------------------------------------------------------

class _Scratch:
    """One reused BF16 buffer per model and device: the decode target of
    every PackedLinear for inputs the GEMV does not take.  Threads running
    the model at once share it: each decode and the use of its result run
    inside use(), or one thread's layer ran with another's decoded weight.
    use() holds self.lock, which orders the host; on a GPU the work is only
    enqueued then, so use() orders the streams too: the current stream
    waits for an event recorded after the last use on another stream (a
    decode on stream B cannot overwrite the buffer while a matmul on stream
    A still reads it), and the buffer is marked with record_stream for each
    stream that used it (a reallocation cannot hand its memory to a new
    tensor while another stream still works on it)."""

    def __init__(self, device):
        self.device, self.buf = device, None
        self.lock = threading.Lock()
        self._last = None           # the stream of the last use on a GPU
        self._events = {}           # stream -> its event, recorded after each use on it
        self._marked = set()        # streams the current buffer was record_stream'ed for

    @contextlib.contextmanager
    def use(self):
        with self.lock:
            if self.device.type != "cuda":
                yield self
                return
            torch = _torch()
            s = torch.cuda.current_stream(self.device)
            if self._last is not None and self._last != s:
                s.wait_event(self._events[self._last])
            try:
                yield self
            finally:
                if self.buf is not None and s not in self._marked:
                    self.buf.record_stream(s)
                    self._marked.add(s)
                ev = self._events.get(s)
                if ev is None:
                    ev = self._events[s] = torch.cuda.Event()
                ev.record(s)
                self._last = s

    def reserve(self, numel):
        import torch
        if self.buf is None or self.buf.numel() < numel:
            self.buf = torch.empty(numel, dtype=torch.bfloat16, device=self.device)
            self._marked = set()

    def view(self, rows, cols):
        self.reserve(rows * cols)
        return self.buf[:rows * cols].view(rows, cols)


def _linear_base():
    """torch's Module; without torch, object: PackedDir (files and tensors
    read into any buffer) needs no torch, and everything that builds a module
    imports torch first (ImportError there, with its name)."""
    try:
        import torch.nn as nn
    except ImportError:
        return object
    return nn.Module


class PackedWeight(_linear_base()):
    """A packed BF16 matrix (rows [begin, end) of a tensor, cols per row): on
    the CPU in its packed file (decoded per call through libckread), on a
    GPU in VRAM (ckptfs_gpu.DeviceTensor, set by _load_packed)."""

    def __init__(self, source, name, rows, cols, scratch):
        super().__init__()
        self.source, self.weight_name = source, name
        self.rows, self.n_rows, self.n_cols = rows, rows[1] - rows[0], cols
        self.scratch = scratch
        self.device_tensor = None           # GPU: the packed planes

    @property
    def weight_bytes(self):
        """Device (GPU) or file (CPU) bytes holding the packed weight."""
        if self.device_tensor is not None:
            return self.device_tensor.device_bytes
        t = self.source.info(self.weight_name)
        return t.packed_bytes * self.n_rows // max(t.shape[0], 1)

    def decoded_weight(self, out=None):
        """The weight as a BF16 [rows, cols] tensor (in the shared scratch
        buffer unless out is given: valid until the next decode into it, so
        decode and use it inside `with self.scratch.use():` if threads or
        streams share the model)."""
        if out is None:
            out = self.scratch.view(self.n_rows, self.n_cols)
        if self.device_tensor is not None:
            return self.device_tensor.decode(out=out)
        return self.source.read_rows_into(self.weight_name, out, self.rows)

    def extra_repr(self):
        where = "gpu" if self.device_tensor is not None else "cpu"
        return f"{self.weight_name}, rows={self.rows}, cols={self.n_cols}, packed on {where}"


class PackedLinear(PackedWeight):
    """y = x W^T + b with W packed; on a GPU inputs of at most GEMV_MAX_ROWS
    rows use the fused GEMV, others decode W into the scratch buffer."""

    GEMV_MAX_ROWS = 8

    def __init__(self, source, name, rows, in_features, scratch, bias=None):
        super().__init__(source, name, rows, in_features, scratch)
        self.out_features, self.in_features = self.n_rows, in_features
        self.bias = bias

    def forward(self, x):
        import torch.nn.functional as F
        if x.shape[-1] != self.in_features:
            raise ValueError(f"{self.weight_name}: input has {x.shape[-1]} features, the weight {self.in_features}")
        n = x.numel() // self.in_features
        if self.device_tensor is not None and 0 < n <= self.GEMV_MAX_ROWS and x.dtype == _torch().bfloat16:
            y = self.device_tensor.gemv(x.reshape(n, self.in_features), out_dtype=x.dtype)
            y = y.view(*x.shape[:-1], self.out_features)
            return y + self.bias if self.bias is not None else y
        with self.scratch.use():
            return F.linear(x, self.decoded_weight(), self.bias)


class PackedEmbedding(PackedWeight):
    """An embedding table kept packed: each call decodes the table into the
    shared scratch buffer (no bigger than an untied LM head's, which sizes
    it already) and gathers the rows."""

    def __init__(self, source, name, rows, embedding_dim, scratch, padding_idx=None):
        super().__init__(source, name, rows, embedding_dim, scratch)
        self.num_embeddings, self.embedding_dim, self.padding_idx = self.n_rows, embedding_dim, padding_idx

    def forward(self, ids):
        import torch.nn.functional as F
        with self.scratch.use():
            return F.embedding(ids, self.decoded_weight(), self.padding_idx)


def _load_packed(cls, packed, name, rows, cols, device, scratch, gpu_model, **kw):
    """cls(...) for rows of tensor name, its planes uploaded on a GPU;
    None if the loader could not keep them packed there."""
    m = cls(packed, name, rows, cols, scratch, **kw)
    if device.type == "cuda":
        import ckptfs_gpu
        with _torch().cuda.device(device):
            try:
                m.device_tensor = gpu_model.load(name, rows=rows)
            except ckptfs_gpu.CkgError as e:
                _raise_vram(e, packed.info(name).packed_bytes, device, f"upload {name}")
                raise
        if not m.device_tensor.packed:        # e.g. chunks the kernels cannot index
            return None
    scratch.reserve(m.n_rows * cols)
    return m


def _torch():
    import torch
    return torch


def _raise_vram(e, needed, device, what):
    if getattr(e, "status", None) == 7:       # CKG_ERR_CUDA: cudaMalloc failed, most likely
        free = _torch().cuda.mem_get_info(device)[0]
        raise OutOfVRAMError(f"{what}: device allocation failed on {device} (needs about {_gib(needed)}, "
                             f"{_gib(free)} free): {e}", needed, free) from e


def load_linear(packed_dir, name, device="cpu", rows=None, rank=None, world_size=None, bias_name=None,
                scratch=None):
    """A PackedLinear holding rows [begin, end) of weight `name` (rows=, or
    the rank's slice by row_slice(rank, world_size); default all rows): the
    column-parallel shard of a tensor-parallel layer."""
    dev = _device(device)
    packed = packed_dir if isinstance(packed_dir, PackedDir) else PackedDir(packed_dir)
    t = packed.info(name)
    if not t.packed or len(t.shape) != 2:
        raise ServingError(f"{packed.path}: {name} is {t.dtype} {t.shape} ({t.encoding}), not a packed BF16 matrix")
    if rows is None:
        rows = row_slice(t.shape[0], rank, world_size) if world_size else (0, t.shape[0])
    if not 0 <= rows[0] <= rows[1] <= t.shape[0]:
        raise ValueError(f"{name}: rows {rows} outside [0, {t.shape[0]})")
    bias = None
    if bias_name:
        b = packed.info(bias_name)
        if tuple(b.shape) != (t.shape[0],):   # one per output row, as nn.Linear's
            raise ShapeMismatchError(f"{packed.path}: bias {bias_name} has shape {list(b.shape)}, the weight {name} "
                                     f"needs [{t.shape[0]}]")
        bias = _torch().nn.Parameter(packed.read(bias_name, rows=rows).to(dev), requires_grad=False)
    gm = None
    if dev.type == "cuda":
        import ckptfs_gpu
        gm = ckptfs_gpu.Model(packed.path)
    m = _load_packed(PackedLinear, packed, name, tuple(rows), t.shape[1], dev, scratch or _Scratch(dev), gm,
                     bias=bias)
    if m is None:
        raise ServingError(f"{packed.path}: {name} could not stay packed on {dev}")
    m._gpu_model = gm
    return m


# ---- from_pretrained -------------------------------------------------------------------------

@contextlib.contextmanager
def _params_on_meta():
    """Build modules with their parameters on the meta device (no memory,
    no init), buffers as usual (rotary tables are computed, not loaded)."""
    import torch.nn as nn
    orig = nn.Module.register_parameter

    def register(self, name, param):
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        orig(self, name, param)
    nn.Module.register_parameter = register
    try:
        yield
    finally:
        nn.Module.register_parameter = orig


def _skeleton(meta_dir, dtype, kw):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    config = AutoConfig.from_pretrained(meta_dir)
    with _params_on_meta():
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, **kw)
        except TypeError:   # transformers < 4.56 knows only torch_dtype
            model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype, **kw)
    # generate()'s defaults from the directory's generation_config.json (stop
    # tokens, lengths, sampling), as transformers' from_pretrained takes
    # them: from_config derives them from config.json alone
    if os.path.isfile(os.path.join(meta_dir, "generation_config.json")) and model.can_generate():
        from transformers import GenerationConfig
        model.generation_config = GenerationConfig.from_pretrained(meta_dir)
    return model.eval(), config


def _set(model, dotted, value):
    owner, _, leaf = dotted.rpartition(".")
    setattr(model.get_submodule(owner) if owner else model, leaf, value)


def _tie_groups(model):
    """[names sharing one Parameter] in named_parameters order."""
    groups = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(n)
    return list(groups.values())


def _plan(packed, model, device, pack_embeddings=False):
    """({module name: weight name} of the Linear (and, if asked, Embedding)
    modules to pack: those whose weight is a packed BF16 tensor and which
    the model holds in bfloat16; needed device bytes)."""
    import torch.nn as nn
    kinds = (nn.Linear, nn.Embedding) if pack_embeddings else (nn.Linear,)
    tied = {n for g in _tie_groups(model) if len(g) > 1 for n in g}
    mods, needed, biggest = {}, 0, 0
    for mname, mod in model.named_modules():
        wname = f"{mname}.weight" if mname else "weight"
        if type(mod) in kinds and wname not in tied and wname in packed.tensors and \
                packed.tensors[wname].packed and mod.weight.dtype == _torch().bfloat16:
            mods[mname] = wname
            t = packed.tensors[wname]
            needed += t.packed_bytes + t.packed_bytes // 16   # planes + escape index and padding, about
            biggest = max(biggest, t.nbytes)
    for n, p in model.named_parameters():
        if n.rpartition(".")[0] not in mods or n.endswith(".bias"):
            needed += p.numel() * p.element_size()
    return mods, needed + biggest


def from_pretrained(packed_dir, device="cpu", *, config_from=None, dtype=None, pack_embeddings=False, **kw):
    """The transformers model of a packed directory, its Linear weights
    packed (see the module's doc).  config_from: a directory to read
    config.json (and the rest) from instead of the format library, e.g. the
    mount of packed_dir.  dtype: of the built model (default bfloat16).
    Every tensor gets the dtype the model gives it, as transformers casts
    (a float32 checkpoint makes a bfloat16 model by default; with
    dtype=torch.float32 no weight stays packed, all are BF16 widened).
    pack_embeddings: keep untied embedding tables packed too
    (PackedEmbedding: each call decodes the table into the shared scratch,
    which an untied LM head of the same shape sizes already), instead of
    ordinary tensors.
    Other keywords go to AutoModelForCausalLM.from_config
    (attn_implementation=...)."""
    import torch
    dev = _device(device)
    packed = PackedDir(packed_dir)
    archived = sorted(n for n, t in packed.tensors.items() if t.encoding == "archive")
    if archived:   # format §5.3: CPU only; the kernels decode K15 and byte-split planes
        raise ServingError(f"{packed.path}: tensor {archived[0]} is packed in the archive encoding, which "
                           f"from_pretrained does not load; convert the pack with "
                           f"`ckptfs repack --format k15 {packed.path}`")
    with _meta_files(packed, config_from) as d:
        model, config = _skeleton(d, dtype or torch.bfloat16, kw)
    config._name_or_path = model.name_or_path = packed.path   # not the temporary folder
    linears, needed = _plan(packed, model, dev, pack_embeddings)
    gm = None
    if dev.type == "cuda":
        import ckptfs_gpu
        check_fits(needed, torch.cuda.mem_get_info(dev)[0], dev, f"load {packed.path}")
        gm = ckptfs_gpu.Model(packed.path)
    scratch = _Scratch(dev)
    arch = ",".join(getattr(config, "architectures", None) or [type(model).__name__])

    def need(name, shape):
        """name, a tensor of the packed directory of the shape the model
        gives it (as transformers refuses a checkpoint's tensor of another
        shape: a [1] norm weight would broadcast)."""
        if name not in packed.tensors:
            raise MissingTensorError(f"{packed.path}: the model ({arch}) needs tensor {name}, which no safetensors "
                                     f"file of the packed directory holds")
        got = packed.info(name).shape
        if tuple(got) != tuple(shape):
            raise ShapeMismatchError(f"{packed.path}: tensor {name} has shape {list(got)}, the model ({arch}) needs "
                                     f"{list(shape)}")
        return name

    for mname, wname in linears.items():
        mod, t = model.get_submodule(mname), packed.tensors[need(wname, model.get_submodule(mname).weight.shape)]
        if isinstance(mod, torch.nn.Embedding):
            kw = {"padding_idx": mod.padding_idx}
            cls = PackedEmbedding
        else:
            bias = None
            if mod.bias is not None:
                b = packed.read(need(f"{mname}.bias", mod.bias.shape))
                bias = torch.nn.Parameter(b.to(dev, mod.bias.dtype), requires_grad=False)
            kw, cls = {"bias": bias}, PackedLinear
        pm = _load_packed(cls, packed, wname, (0, t.shape[0]), t.shape[1], dev, scratch, gm, **kw)
        if pm is not None:   # else it stays an ordinary module, loaded below
            _set(model, mname, pm)
    # every other parameter (once per tie group), then persistent buffers
    for group in _tie_groups(model):
        if model.get_parameter(group[0]).device.type != "meta":
            continue                          # a PackedLinear's bias, loaded above
        src = next((n for n in group if n in packed.tensors), group[0])
        want = model.get_parameter(group[0])  # on meta: the shape and dtype the model gives it
        need(src, want.shape)
        p = torch.nn.Parameter(_to_device(packed, src, dev, gm).to(want.dtype), requires_grad=False)
        for n in group:
            _set(model, n, p)
    for n, b in list(model.named_buffers()):
        owner, _, leaf = n.rpartition(".")
        mod = model.get_submodule(owner) if owner else model
        if isinstance(mod, PackedWeight):
            continue
        # a persistent buffer from the checkpoint; the others (rotary
        # inv_freq) are the model's own, as transformers ignores a
        # checkpoint's copy of them
        load = n in packed.tensors and leaf not in mod._non_persistent_buffers_set
        nb = _to_device(packed, need(n, b.shape), dev, gm).to(b.dtype) if load else b.to(dev)
        mod._buffers[leaf] = nb
    model.ckptfs_packed_dir = packed          # keeps the CPU path's reader alive
    model.ckptfs_gpu_model = gm
    model.ckptfs_scratch = scratch
    return model


def _to_device(packed, name, dev, gm):
    if dev.type == "cuda":
        with _torch().cuda.device(dev):
            t = gm.load(name)
            return t.decode() if t.packed else t.to_torch().clone()   # own memory, not the loader's
    return packed.read(name)
