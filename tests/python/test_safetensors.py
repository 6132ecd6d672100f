"""safetensors' own loaders read a ckptfs mount bit for bit like the source.

Shards with many dtypes (BF16 with NaN payloads, +-Inf, -0, denormals and all
65536 bit patterns; F32, F16, I64, U8, BOOL, FP8 e4m3/e5m2; a scalar and an
empty tensor), with and without __metadata__, one written by hand with an
unusual header; packed with --format k15, bytesplit and archive; compared through
safe_open(framework="pt") (get_tensor, get_slice, metadata) and load_file."""
import json
import os
import sys

import pytest

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors")
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from conftest import mount_fixture, pack  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from st_write import write_safetensors  # noqa: E402

BF16_SPECIAL = [
    0x7FC0, 0xFFC0, 0x7F81, 0xFF81, 0x7FFF, 0xFFFF, 0x7FA5,   # NaNs: quiet, signalling, payloads, negative
    0x7F80, 0xFF80,                                           # +Inf, -Inf
    0x0000, 0x8000,                                           # +0, -0
    0x0001, 0x8001, 0x007F, 0x807F, 0x0040,                   # denormals
    0x0080, 0x8080, 0x7F7F, 0xFF7F,                           # smallest normal, largest finite
]


def bf16_bits(bits):
    return torch.tensor(bits, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)


def gauss_bf16(g, shape, std=0.02):
    return (torch.randn(shape, generator=g) * std).to(torch.bfloat16)


def with_specials(g, n, every=97):
    t = gauss_bf16(g, (n,)).view(torch.int16).clone()
    sp = bf16_bits(BF16_SPECIAL).view(torch.int16)
    idx = torch.arange(0, n, every)
    t[idx] = sp[torch.arange(len(idx)) % len(sp)]
    return t.view(torch.bfloat16)


def all_bits_bf16(g, reps):
    perms = [torch.randperm(65536, generator=g) for _ in range(reps)]
    return torch.stack(perms).to(torch.int32).to(torch.int16).view(torch.bfloat16)


def write_by_hand(path, tensors):
    """A header json.dumps writes (spaces after ':' and ','), keys in reverse
    order, no __metadata__, padded with spaces to 8 bytes (st_write)."""
    dtypes = {torch.bfloat16: ("BF16", torch.int16), torch.float32: ("F32", torch.float32),
              torch.int32: ("I32", torch.int32)}
    write_safetensors(path, [(name, dtypes[t.dtype][0], t.contiguous().view(dtypes[t.dtype][1]).numpy())
                             for name, t in reversed(tensors)])


def make_source(src):
    os.makedirs(src)
    g = torch.Generator().manual_seed(1130)
    s1 = {
        "model.embed_tokens.weight": gauss_bf16(g, (1024, 1536)),
        "model.special": with_specials(g, 300001),
        "model.allbits": all_bits_bf16(g, 3),
        "model.wide": gauss_bf16(g, (512, 512), std=1.0),
        "model.zeros": torch.zeros(100000, dtype=torch.bfloat16),
        "model.negzeros": bf16_bits([0x8000] * 70000),
        "model.scalar": torch.tensor(-0.0, dtype=torch.bfloat16),
        "model.empty": torch.zeros((0, 4), dtype=torch.bfloat16),
        "f32": torch.cat([torch.randn(1000, generator=g),
                          torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1e-45])]),
        "f16": torch.cat([torch.randn(4099, generator=g).half(),
                          torch.tensor([float("nan"), float("inf"), -0.0, 6e-8], dtype=torch.float16)]),
        "i64": torch.tensor([0, -1, 2**63 - 1, -2**63, 12345678901234], dtype=torch.int64).repeat(1000),
        "u8": torch.arange(256, dtype=torch.int32).to(torch.uint8).repeat(300),
        "mask": torch.rand(10007, generator=g) > 0.5,
    }
    if hasattr(torch, "float8_e4m3fn"):
        s1["fp8_e4m3"] = torch.arange(256, dtype=torch.int32).to(torch.uint8).repeat(17).view(torch.float8_e4m3fn)
    if hasattr(torch, "float8_e5m2"):
        s1["fp8_e5m2"] = torch.arange(256, dtype=torch.int32).to(torch.uint8).repeat(5).view(torch.float8_e5m2)
    save_file(s1, os.path.join(src, "model-00001-of-00003.safetensors"),
              metadata={"format": "pt", "producer": "ckptfs tests", "note": "ünïcödé ✓", "empty": ""})
    s2 = {
        "model.layers.0.mlp.up_proj.weight": gauss_bf16(g, (4096, 700), std=0.006),
        "model.layers.0.attn.o_proj.weight": gauss_bf16(g, (4, 64, 130), std=0.05),
        "model.layers.0.norm.weight": torch.ones(4096, dtype=torch.float32),
        "model.layers.0.tiny": gauss_bf16(g, (3,)),
    }
    save_file(s2, os.path.join(src, "model-00002-of-00003.safetensors"), metadata={"format": "pt"})
    write_by_hand(os.path.join(src, "model-00003-of-00003.safetensors"), [
        ("lm_head.weight", gauss_bf16(g, (777, 333), std=0.03)),
        ("lm_head.bias", torch.randn(777, generator=g)),
        ("positions", torch.arange(50000, dtype=torch.int32)),
    ])
    with open(os.path.join(src, "config.json"), "w") as f:
        json.dump({"torch_dtype": "bfloat16"}, f)
    return src


def shards(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))


def raw(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def assert_same(a, b, what):
    assert a.dtype == b.dtype, "%s: dtype %s != %s" % (what, a.dtype, b.dtype)
    assert a.shape == b.shape, "%s: shape %s != %s" % (what, a.shape, b.shape)
    assert torch.equal(raw(a), raw(b)), "%s: bytes differ" % what


@pytest.fixture(scope="module")
def source(workdir):
    return make_source(os.path.join(workdir, "st-src"))


@pytest.fixture(scope="module", params=["k15", "bytesplit", "archive"])
def packed(request, ckptfs, workdir, source):
    fmt = request.param
    return pack(ckptfs, source, os.path.join(workdir, "st-dst-" + fmt), fmt)


@pytest.fixture
def mounted(ckptfs, packed):
    """A fresh mount per test: nothing is served from an earlier test's page
    cache, every read goes through the daemon."""
    yield from mount_fixture(ckptfs, packed, packed + ".mnt", "cache_size=16M")


def test_listing_and_bytes(source, mounted):
    assert sorted(os.listdir(mounted.path)) == sorted(os.listdir(source))
    for name in os.listdir(source):
        with open(os.path.join(source, name), "rb") as a, open(os.path.join(mounted.path, name), "rb") as b:
            assert a.read() == b.read(), name


def test_safe_open(source, mounted):
    n = 0
    for name in shards(source):
        with safe_open(os.path.join(source, name), framework="pt") as fa, \
             safe_open(os.path.join(mounted.path, name), framework="pt") as fb:
            assert fb.metadata() == fa.metadata(), name
            assert list(fb.keys()) == list(fa.keys()), name
            for k in fa.keys():
                assert_same(fb.get_tensor(k), fa.get_tensor(k), "%s:%s" % (name, k))
                n += 1
    assert n >= 20


SLICES = {
    "model.embed_tokens.weight": [(slice(3, 17),), (slice(None), slice(5, 9)), (slice(1000, 1024), slice(1500, 1536))],
    "model.special": [(slice(96, 200),), (slice(299000, None),)],
    "model.layers.0.attn.o_proj.weight": [(slice(1, 3), slice(10, 20), slice(None)), (slice(None), slice(None), slice(129, 130))],
    "lm_head.weight": [(slice(776, 777),), (slice(100, 300), slice(0, 1))],
    "f16": [(slice(4090, 4103),)],
    "i64": [(slice(2, 4999),)],
}


def test_get_slice(source, mounted):
    seen = 0
    for name in shards(source):
        with safe_open(os.path.join(source, name), framework="pt") as fa, \
             safe_open(os.path.join(mounted.path, name), framework="pt") as fb:
            for k, slices in SLICES.items():
                if k not in fa.keys():
                    continue
                sa, sb = fa.get_slice(k), fb.get_slice(k)
                assert sb.get_shape() == sa.get_shape() and sb.get_dtype() == sa.get_dtype(), k
                for s in slices:
                    assert_same(sb[s], sa[s], "%s%s" % (k, s))
                    seen += 1
    assert seen == sum(len(v) for v in SLICES.values())


def test_load_file(source, mounted):
    for name in shards(source):
        a = load_file(os.path.join(source, name))
        b = load_file(os.path.join(mounted.path, name))
        assert list(b) == list(a), name
        for k in a:
            assert_same(b[k], a[k], "%s:%s" % (name, k))


def test_load_from_bytes_and_specials(source, mounted):
    """safetensors.torch.load on the whole file read() through the mount, and
    the special BF16 values survive as bit patterns (NaN payloads included)."""
    from safetensors.torch import load
    name = "model-00001-of-00003.safetensors"
    with open(os.path.join(mounted.path, name), "rb") as f:
        b = load(f.read())
    bits = b["model.special"].view(torch.int16)[::97][:len(BF16_SPECIAL)].to(torch.int32) & 0xFFFF
    assert bits.tolist() == BF16_SPECIAL
    allbits = b["model.allbits"].view(torch.int16).to(torch.int32) & 0xFFFF
    for row in allbits:
        assert torch.equal(torch.sort(row).values, torch.arange(65536, dtype=torch.int32))
