"""Serving from a packed directory on the CPU (ckptfs_gpu_hf, libckread): a
tiny Llama-style model with random BF16 weights, saved by transformers in
several shards with a tokenizer, packed by the `ckptfs` CLI (K15 and
byte-split), then loaded with ckptfs_gpu_hf.from_pretrained(device="cpu").
Truth is independent: the same model loaded by transformers from the
original directory, and the original safetensors read by the safetensors
library.  Checks: logits bit for bit, greedy generate, tied weights,
tensor-parallel row slices reassembling each weight bit for bit, config and
tokenizer read through the format library (and through the mount when root
and /dev/fuse allow), and the errors of bad use.

Run by ctest (python_serving) with $CKPTFS (the CLI) and $CKPTFS_READ_LIB.
"""
import ctypes as C
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors = pytest.importorskip("safetensors")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckptfs_gpu_hf as ckhf  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "lib"))
from tiny_llama import tiny_llama as _tiny_llama  # noqa: E402
from format_dtypes import format_dtypes, write_every_dtype  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
VOCAB = 512


def ckptfs_bin():
    b = os.environ.get("CKPTFS")
    if not b or not os.access(b, os.X_OK):
        pytest.skip("set CKPTFS to the ckptfs binary")
    return b


def tiny_llama(tied=False, layers=2):
    return _tiny_llama(1201 + tied, tied=tied, layers=layers, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def save_tokenizer(d):
    """A word-level tokenizer of VOCAB words, made offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    vocab.update({f"w{i}": i for i in range(4, VOCAB)})
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                            pad_token="<pad>").save_pretrained(d)


def pack(src, dst, fmt):
    r = subprocess.run([ckptfs_bin(), "pack", "--format", fmt, src, dst], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    assert r.returncode == 0, r.stdout.decode(errors="replace")[-2000:]
    return dst


def hf_load(path):
    from transformers import LlamaForCausalLM
    try:
        m = LlamaForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
    except TypeError:       # transformers < 4.56 knows only torch_dtype
        m = LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16)
    return m.eval()


def bits(t):
    return t.contiguous().view(torch.int16)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return str(tmp_path_factory.mktemp("serving"))


@pytest.fixture(scope="module")
def src(work):
    d = os.path.join(work, "src")
    tiny_llama().save_pretrained(d, max_shard_size="100KB", safe_serialization=True)
    save_tokenizer(d)
    return d


@pytest.fixture(scope="module", params=["k15", "bytesplit"])
def packed(request, work, src):
    return pack(src, os.path.join(work, "packed-" + request.param), request.param)


@pytest.fixture(scope="module")
def original(src):
    return hf_load(src)


def original_tensors(src):
    from safetensors import safe_open
    out = {}
    for f in sorted(os.listdir(src)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(src, f), "pt") as s:
                out.update({k: s.get_tensor(k) for k in s.keys()})
    return out


def test_model_is_sharded(src):
    with open(os.path.join(src, "model.safetensors.index.json")) as f:
        assert len(set(json.load(f)["weight_map"].values())) >= 3


def test_logits_bit_exact(src, packed, original):
    m = ckhf.from_pretrained(packed, device="cpu")
    lin = {n: mod for n, mod in m.named_modules() if isinstance(mod, ckhf.PackedLinear)}
    all_lin = [n for n, mod in original.named_modules() if isinstance(mod, torch.nn.Linear)]
    assert sorted(lin) == sorted(all_lin) and len(lin) == 2 * 7 + 1, sorted(lin)
    # one scratch buffer for the model, the size of its largest Linear weight
    sizes = [mod.out_features * mod.in_features for mod in lin.values()]
    assert len({id(mod.scratch) for mod in lin.values()}) == 1
    assert m.ckptfs_scratch.buf.numel() == max(sizes)
    # non-Linear tensors are ordinary tensors, equal to the originals
    ref = original_tensors(src)
    for n, p in m.named_parameters():
        if not n.endswith(".bias") and n.rpartition(".")[0] not in lin:
            assert p.dtype == torch.bfloat16 and torch.equal(bits(p), bits(ref[n])), n
    # and each packed weight decodes to the original
    for n, mod in lin.items():
        assert torch.equal(bits(mod.decoded_weight()), bits(ref[n + ".weight"])), n
    g = torch.Generator().manual_seed(7)
    for shape in [(2, 24), (1, 5), (1, 1)]:   # prefill and rows <= 8
        ids = torch.randint(0, VOCAB, shape, generator=g)
        with torch.no_grad():
            la, lb = original(ids).logits, m(ids).logits
        assert torch.isfinite(la.float()).all()
        assert torch.equal(bits(la), bits(lb)), shape


def test_generate_same_tokens(packed, original):
    m = ckhf.from_pretrained(packed, device="cpu")
    ids = torch.randint(4, VOCAB, (2, 6), generator=torch.Generator().manual_seed(3))
    kw = dict(max_new_tokens=8, do_sample=False, attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        a, b = original.generate(ids, **kw), m.generate(ids, **kw)
    assert a.shape == (2, 14) and torch.equal(a, b)


def test_packed_embeddings(packed, original):
    m = ckhf.from_pretrained(packed, device="cpu", pack_embeddings=True)
    assert isinstance(m.model.embed_tokens, ckhf.PackedEmbedding)
    assert m.ckptfs_scratch.buf.numel() == VOCAB * 64   # the LM head's size already
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(13))
    with torch.no_grad():
        assert torch.equal(bits(original(ids).logits), bits(m(ids).logits))
        kw = dict(max_new_tokens=4, do_sample=False, attention_mask=torch.ones_like(ids))
        assert torch.equal(original.generate(ids, **kw), m.generate(ids, **kw))


def test_tied_weights_stay_tied(work):
    d = os.path.join(work, "tied-src")
    tiny_llama(tied=True).save_pretrained(d, max_shard_size="100KB", safe_serialization=True)
    p = pack(d, os.path.join(work, "tied-packed"), "k15")
    m, ref = ckhf.from_pretrained(p, device="cpu", pack_embeddings=True), hf_load(d)
    assert m.lm_head.weight is m.model.embed_tokens.weight
    assert type(m.model.embed_tokens) is torch.nn.Embedding
    assert type(m.lm_head) is torch.nn.Linear
    assert isinstance(m.model.layers[0].mlp.up_proj, ckhf.PackedLinear)
    ids = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert torch.equal(bits(ref(ids).logits), bits(m(ids).logits))


def test_tensor_parallel_slices_reassemble(src, packed):
    ref = original_tensors(src)
    names = [n for n, t in ref.items() if t.dim() == 2 and "embed" not in n]
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    for name in names:
        full = ref[name]
        for ws in (2, 3):
            parts = [ckhf.load_linear(packed, name, "cpu", rank=r, world_size=ws) for r in range(ws)]
            assert sum(p.out_features for p in parts) == full.shape[0]
            w = torch.cat([p.decoded_weight(out=torch.empty(p.out_features, p.in_features, dtype=torch.bfloat16))
                           for p in parts])
            assert torch.equal(bits(w), bits(full)), (name, ws)
        part = ckhf.load_linear(packed, name, "cpu", rows=(5, 29))
        assert torch.equal(bits(part.decoded_weight()), bits(full[5:29]))
        if full.shape[1] == 64:
            with torch.no_grad():
                assert torch.equal(bits(part(x)), bits(torch.nn.functional.linear(x, full[5:29])))
    assert ckhf.row_slice(10, 0, 3) == (0, 4) and ckhf.row_slice(10, 2, 3) == (7, 10)
    with pytest.raises(ValueError):
        ckhf.row_slice(10, 3, 3)


def test_config_and_tokenizer_through_the_format_library(src, packed):
    from transformers import AutoTokenizer
    a, b = AutoTokenizer.from_pretrained(src), ckhf.load_tokenizer(packed)
    text = "w5 w17 w300 nothing w511"
    assert a(text)["input_ids"] == b(text)["input_ids"] and len(b(text)["input_ids"]) == 5
    m = ckhf.from_pretrained(packed, device="cpu")
    a, b = m.config.to_dict(), hf_load(src).config.to_dict()
    assert a.pop("_name_or_path") == packed and b.pop("_name_or_path") == src
    assert a == b


def test_config_through_the_mount(src, packed, original):
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
        pytest.skip("needs root, /dev/fuse and fusermount3")
    mnt = packed + ".mnt"
    os.makedirs(mnt, exist_ok=True)
    proc = subprocess.Popen([ckptfs_bin(), "mount", "-f", packed, mnt], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(mnt, "config.json")):
            assert proc.poll() is None and time.monotonic() < deadline, "mount failed"
            time.sleep(0.05)
        m = ckhf.from_pretrained(packed, device="cpu", config_from=mnt)
        tok = ckhf.load_tokenizer(packed, config_from=mnt)
        ids = torch.tensor([tok("w9 w10 w11")["input_ids"]])
        with torch.no_grad():
            assert torch.equal(bits(original(ids).logits), bits(m(ids).logits))
    finally:
        subprocess.call(["fusermount3", "-u", mnt]) == 0 or subprocess.call(["umount", "-l", mnt])
        proc.wait(timeout=15)


# ---- bad use ---------------------------------------------------------------------------------

def test_error_not_a_packed_directory(src):
    with pytest.raises(ckhf.ServingError, match="not a readable packed directory.*manifest"):
        ckhf.from_pretrained(src, device="cpu")


def test_error_not_a_model(work):
    d = os.path.join(work, "tensors-only")
    os.makedirs(d)
    from safetensors.torch import save_file
    save_file({"w": torch.zeros(4, 4, dtype=torch.bfloat16)}, os.path.join(d, "w.safetensors"))
    p = pack(d, os.path.join(work, "tensors-only-packed"), "k15")
    with pytest.raises(ckhf.NotAModelError, match="no config.json: not a Hugging Face model.*w.safetensors"):
        ckhf.from_pretrained(p, device="cpu")


def test_error_missing_tensor(work, src):
    d = os.path.join(work, "three-layers")
    shutil.copytree(src, d)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["num_hidden_layers"] = 3     # the shards hold layers 0 and 1 only
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    p = pack(d, os.path.join(work, "three-layers-packed"), "k15")
    with pytest.raises(ckhf.MissingTensorError, match=r"needs tensor model\.layers\.2\.[a-z_.]+weight"):
        ckhf.from_pretrained(p, device="cpu")
    with pytest.raises(ckhf.MissingTensorError, match="no tensor nope"):
        ckhf.load_linear(p, "nope", "cpu")


def test_every_dtype_round_trips(work):
    # a tensor of every dtype of docs/format.md §4.3, packed: its name and
    # code come back as the spec and the header give them, and its bytes as
    # written (as bytes, and as a torch tensor where torch has the dtype)
    d = os.path.join(work, "dtypes")
    os.makedirs(d)
    tensors = write_every_dtype(os.path.join(d, "all.safetensors"))
    codes = {n: c for c, n in format_dtypes().items()}
    p = ckhf.PackedDir(pack(d, os.path.join(work, "dtypes-packed"), "k15"))
    assert set(p.tensors) == set(tensors)
    for name, (dt, shape, data) in tensors.items():
        t = p.info(name)
        assert (t.dtype, t.dtype_code, list(t.shape), t.nbytes) == (dt, codes[dt], shape, len(data)), t
        raw = p.read_rows_into(name, torch.empty(len(data), dtype=torch.uint8))
        assert bytes(raw.numpy()) == data, name
        if dt in ("F4", "F6_E2M3", "F6_E3M2"):  # under a byte an element: no torch dtype
            with pytest.raises(ckhf.ServingError, match=f"dtype {dt}, which torch cannot hold"):
                p.read(name)
            continue
        got = p.read(name)
        assert list(got.shape) == shape and got.element_size() * 8 == len(data), (name, got.dtype)
        assert bytes(got.contiguous().view(torch.uint8).numpy()) == data, name
    p.close()


def test_error_shape_mismatch(work, src):
    # a tensor of another shape than the model gives it is refused, as
    # transformers refuses it ("size mismatch"): a [1] norm weight broadcast
    # silently, and a linear's swapped dims gave outputs of the wrong size
    from safetensors.torch import load_file, save_file
    with open(os.path.join(src, "model.safetensors.index.json")) as f:
        shard_of = json.load(f)["weight_map"]
    cases = {"model.norm.weight": lambda t: t[:1].clone(),
             "model.layers.1.mlp.down_proj.weight": lambda t: t.t().contiguous(),
             "model.layers.0.self_attn.q_proj.weight": lambda t: t[:-1].clone()}
    for i, (name, change) in enumerate(cases.items()):
        d = os.path.join(work, f"shape-{i}")
        shutil.copytree(src, d)
        shard = os.path.join(d, shard_of[name])
        sd = load_file(shard)
        want = list(sd[name].shape)
        sd[name] = change(sd[name])
        save_file(sd, shard, metadata={"format": "pt"})
        p = pack(d, d + "-packed", "k15")
        with pytest.raises(ckhf.ShapeMismatchError,
                           match=rf"tensor {name} has shape \[{', '.join(map(str, sd[name].shape))}\], "
                                 rf"the model \(LlamaForCausalLM\) needs \[{', '.join(map(str, want))}\]"):
            ckhf.from_pretrained(p, device="cpu")


def test_read_rows_into_refuses_a_strided_out(packed):
    # the C side writes the bytes in order from out's first element: into a
    # transposed view they landed in the wrong elements, with no error
    p = ckhf.PackedDir(packed)
    name = next(n for n, t in p.tensors.items() if t.packed and t.shape[0] != t.shape[1])
    r, c = p.info(name).shape
    with pytest.raises(ValueError, match=f"read {name}: out must be a contiguous CPU tensor, not a non-contiguous"):
        p.read_rows_into(name, torch.empty(c, r, dtype=torch.bfloat16).t())
    with pytest.raises(ValueError, match="not a meta one"):
        p.read_rows_into(name, torch.empty(r, c, dtype=torch.bfloat16, device="meta"))
    out = p.read_rows_into(name, torch.empty(r, c, dtype=torch.bfloat16))
    assert torch.equal(bits(out), bits(p.read(name)))

    class Buf:  # no torch needed: any contiguous buffer (tests/packaging's use)
        def __init__(self, n):
            self.b, self.n = C.create_string_buffer(n), n

        def data_ptr(self):
            return C.addressof(self.b)

        def numel(self):
            return self.n

        def element_size(self):
            return 1
    raw = p.read_rows_into(name, Buf(r * c * 2))
    assert raw.b.raw == bytes(out.contiguous().view(torch.uint8).numpy())
    p.close()


def test_weights_beside_the_shards_not_read(work, src, original):
    # older repositories keep pytorch_model.bin beside the safetensors
    # shards: from_pretrained needs only config and tokenizer files, and read
    # every other top-level file whole (a damaged .bin it never needed
    # failed the load; a real one is gigabytes in memory and in /tmp)
    d = os.path.join(work, "with-bin")
    shutil.copytree(src, d)
    for name in ("pytorch_model.bin", "training_args.bin"):
        with open(os.path.join(d, name), "wb") as f:
            f.write(os.urandom(300 << 10))
    p = pack(d, d + "-packed", "k15")
    with open(os.path.join(p, "pytorch_model.bin.ckpt"), "r+b") as f:
        f.seek(150 << 10)
        b = f.read(1)
        f.seek(150 << 10)
        f.write(bytes([b[0] ^ 1]))
    with pytest.raises(ckhf.ServingError, match="pytorch_model.bin"):
        ckhf.PackedDir(p).read_file("pytorch_model.bin")          # damaged indeed
    m = ckhf.from_pretrained(p, device="cpu")
    ids = torch.tensor([[1, 17, 300, 42]])
    with torch.no_grad():
        assert torch.equal(m(ids).logits, original(ids).logits)


def test_error_ambiguous_tensor(work, src):
    # two files holding a tensor of one name: a lookup by that name is
    # refused naming both, instead of PackedDir taking the last file's while
    # libckread's ckr_find (the GPU loader's lookup) took the first's
    from safetensors.torch import save_file
    d = os.path.join(work, "two-norms")
    shutil.copytree(src, d)
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        shard = json.load(f)["weight_map"]["model.norm.weight"]
    save_file({"model.norm.weight": torch.full((64,), 3.0, dtype=torch.bfloat16)},
              os.path.join(d, "extra.safetensors"), metadata={"format": "pt"})
    p = ckhf.PackedDir(pack(d, d + "-packed", "k15"))
    assert p.tensors["model.norm.weight"].file == "extra.safetensors"   # the first, as ckr_find
    msg = rf"tensor model\.norm\.weight is in 2 safetensors files \(extra\.safetensors, {shard}\)"
    with pytest.raises(ckhf.AmbiguousTensorError, match=msg):
        p.read("model.norm.weight")
    with pytest.raises(ckhf.AmbiguousTensorError, match=msg):
        ckhf.from_pretrained(p.path, device="cpu")
    p.close()


def test_dtype_is_the_models(work, src, packed):
    # every tensor gets the model's dtype, as transformers casts: a float32
    # checkpoint gave a float32 model whatever dtype= said (logits off by
    # 3e-3 from transformers' bfloat16 model), and dtype=torch.float32 over
    # BF16 weights a bfloat16 one
    from transformers import LlamaForCausalLM
    ids = torch.tensor([[1, 17, 300, 42]])
    d = os.path.join(work, f"f32-{os.path.basename(packed)}")
    tiny_llama().to(torch.float32).save_pretrained(d, safe_serialization=True)
    p = pack(d, d + "-packed", packed.rsplit("-", 1)[1])
    m = ckhf.from_pretrained(p, device="cpu")
    assert {q.dtype for q in m.parameters()} == {torch.bfloat16}
    with torch.no_grad():
        assert torch.equal(m(ids).logits, hf_load(d)(ids).logits)
    m = ckhf.from_pretrained(packed, device="cpu", dtype=torch.float32)
    assert {q.dtype for q in m.parameters()} == {torch.float32}
    try:
        ref = LlamaForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    except TypeError:       # transformers < 4.56 knows only torch_dtype
        ref = LlamaForCausalLM.from_pretrained(src, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        assert torch.equal(m(ids).logits, ref(ids).logits)


def test_load_linear_bias_of_another_shape(packed):
    # a bias is one value per output row of the whole weight: a longer one
    # was cut to the rows asked for, silently (the first 32 of a [64] norm
    # weight as k_proj's bias)
    w = "model.layers.0.self_attn.k_proj.weight"
    with pytest.raises(ckhf.ShapeMismatchError, match=rf"bias model\.norm\.weight has shape \[64\], the weight {w} "
                                                      r"needs \[32\]"):
        ckhf.load_linear(packed, w, "cpu", bias_name="model.norm.weight")


def test_concurrent_forwards(packed):
    # threads running one model at once (a server's requests): every output
    # is the one a lone call gives; they shared the decode scratch, so a
    # layer could run with another thread's decoded weight (101 of 120
    # outputs wrong here)
    import threading
    m = ckhf.from_pretrained(packed, device="cpu", pack_embeddings=True)
    torch.manual_seed(3)
    inputs = [torch.randint(4, VOCAB, (1, 9 + i)) for i in range(4)]
    with torch.no_grad():
        want = [m(x).logits for x in inputs]
    wrong = []

    def run(i):
        with torch.no_grad():
            for _ in range(10):
                if not torch.equal(m(inputs[i]).logits, want[i]):
                    wrong.append(i)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(inputs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not wrong, f"{len(wrong)} of {10 * len(inputs)} outputs differ from a lone call's"


def test_non_persistent_buffers_are_the_models(work, src, original):
    # a checkpoint holding a copy of a buffer the model computes and does
    # not save (rotary inv_freq, here rounded to BF16): transformers ignores
    # it, and so must from_pretrained (it loaded it: logits 2.7e-3 off)
    from safetensors.torch import save_file
    d = os.path.join(work, "with-inv-freq")
    shutil.copytree(src, d)
    inv = dict(original.named_buffers())["model.rotary_emb.inv_freq"]
    save_file({"model.rotary_emb.inv_freq": inv.to(torch.bfloat16)}, os.path.join(d, "extra.safetensors"),
              metadata={"format": "pt"})
    m = ckhf.from_pretrained(pack(d, d + "-packed", "k15"), device="cpu")
    ids = torch.tensor([[1, 17, 300, 42, 7, 9, 100, 3]])
    with torch.no_grad():
        assert torch.equal(m(ids).logits, original(ids).logits)


def test_generation_config_is_the_directorys(work, src):
    # generate() stops and penalizes as the directory's generation_config.json
    # says, as with transformers' load of it (it was ignored: 20 new tokens
    # where transformers gave 5)
    d = os.path.join(work, "gen-config")
    shutil.copytree(src, d)
    with open(os.path.join(d, "generation_config.json")) as f:
        g = json.load(f)
    g.update(eos_token_id=[2, 300], max_new_tokens=5, repetition_penalty=1.3)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump(g, f)
    m = ckhf.from_pretrained(pack(d, d + "-packed", "k15"), device="cpu")
    ref = hf_load(d)
    for k in ("eos_token_id", "max_new_tokens", "repetition_penalty"):
        assert getattr(m.generation_config, k) == getattr(ref.generation_config, k), k
    ids = torch.tensor([[1, 17, 300, 42]])
    assert m.generate(ids, do_sample=False).tolist() == ref.generate(ids, do_sample=False).tolist()


def test_read_rows_outside(work, packed):
    # rows outside the tensor are refused before anything is allocated: a
    # reversed range met torch's "negative dimension", a far one allocated
    # its size first, and rows (0, 0) of a 0-d tensor returned an
    # uninitialized element with no error
    p = ckhf.PackedDir(packed)
    name = "model.norm.weight"
    for rows in ((5, 2), (0, 1 << 40), (-1, 3)):
        with pytest.raises(ValueError, match=rf"read {name}: rows \[{rows[0]}, {rows[1]}\) outside \[0, 64\)"):
            p.read(name, rows=rows)
    assert torch.equal(bits(p.read(name, rows=(3, 7))), bits(p.read(name)[3:7]))
    p.close()
    from safetensors.torch import save_file
    d = os.path.join(work, "scalar-" + os.path.basename(packed))
    os.makedirs(d)
    save_file({"s": torch.tensor(2.5, dtype=torch.float32)}, os.path.join(d, "s.safetensors"))
    p = ckhf.PackedDir(pack(d, d + "-packed", "k15"))
    assert p.read("s").item() == 2.5
    with pytest.raises(ValueError, match=r"rows \[0, 0\) outside \[0, 1\) \(a 0-d tensor: its one row\)"):
        p.read("s", rows=(0, 0))
    p.close()


def test_error_wrong_device(packed):
    for dev, msg in [("tpu", "not a device name"), ("meta", "'cpu' or 'cuda"), ("cuda:0", None)]:
        if dev == "cuda:0" and torch.cuda.is_available():
            dev, msg = f"cuda:{torch.cuda.device_count()}", "this machine has"
        elif dev == "cuda:0":
            msg = "torch sees no CUDA device"
        with pytest.raises(ckhf.DeviceError, match=msg):
            ckhf.from_pretrained(packed, device=dev)


def test_error_out_of_vram_message():
    # The check from_pretrained runs before it uploads anything (the free
    # figure is torch.cuda.mem_get_info's on a GPU).
    with pytest.raises(ckhf.OutOfVRAMError, match=r"needs 3\.00 GiB \(3221225472 bytes\).*cuda:0, 1\.00 GiB free") as e:
        ckhf.check_fits(3 << 30, 1 << 30, "cuda:0", "load /x")
    assert e.value.needed == 3 << 30 and e.value.free == 1 << 30
    ckhf.check_fits(1 << 30, 1 << 30, "cuda:0", "load /x")


def test_needed_bytes_estimate(packed, original):
    # what the OOM check compares: packed planes + ordinary tensors + one scratch
    p = ckhf.PackedDir(packed)
    with ckhf._meta_files(p, None) as d:
        model, _ = ckhf._skeleton(d, torch.bfloat16, {})
    linears, needed = ckhf._plan(p, model, torch.device("cpu"))
    bf16 = sum(t.numel() * 2 for t in original.state_dict().values() if t.dtype == torch.bfloat16)
    planes = sum(p.tensors[w].packed_bytes for w in linears.values())
    assert len(linears) == 15 and planes < 0.8 * sum(p.tensors[w].nbytes for w in linears.values())
    biggest = max(p.tensors[w].nbytes for w in linears.values())
    assert planes < needed - biggest < bf16


def test_serve_check_cpu_parts(work):
    # gpu/check.sh's serve_check.py: what it can do without a GPU (make a
    # sharded model, pack it) gives a packed model from_pretrained loads
    import serve_check
    w = os.path.join(work, "serve_check")
    assert serve_check.main(["--ckptfs", ckptfs_bin(), "--work", w, "--size", "tiny", "--make-only"]) == 0
    shards = [f for f in os.listdir(os.path.join(w, "model")) if f.endswith(".safetensors")]
    assert len(shards) >= 3
    m = ckhf.from_pretrained(os.path.join(w, "packed"), device="cpu")
    assert m.config.num_hidden_layers == 2 and isinstance(m.lm_head, ckhf.PackedLinear)


def test_archive_pack_refused(work, src):
    """An archive pack (format §5.3, CPU only) is refused, naming the command that converts it."""
    d = pack(src, os.path.join(work, "packed-archive"), "archive")
    with pytest.raises(ckhf.ServingError, match=r"archive encoding.*ckptfs repack --format k15"):
        ckhf.from_pretrained(d, device="cpu")


# ---- serving on CUDA streams (issue 26 item 5): no GPU needed, torch's stream calls stubbed ----------

class _FakeStream:
    """A torch.cuda.Stream stand-in that records what it was made to wait for."""
    def __init__(self, handle):
        self.cuda_stream, self.waited = handle, []

    def wait_event(self, ev):
        self.waited.append(ev)

    def wait_stream(self, s):
        self.waited.append(s)


class _FakeEvent:
    def __init__(self):
        self.recorded_on = []

    def record(self, s):
        self.recorded_on.append(s)


def test_scratch_orders_streams(monkeypatch):
    # the shared decode scratch on a GPU: the host lock only orders the
    # enqueueing, so a decode into it on stream B must wait for an event
    # recorded after the last use on stream A (a matmul still reading it);
    # on the same stream, no wait; the buffer is record_stream'ed for each
    # stream that used it, once
    import types
    a, b = _FakeStream(1), _FakeStream(2)
    cur = [a]
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: cur[0])
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    marked = []
    sc = ckhf._Scratch(torch.device("cuda", 0))
    sc.buf = types.SimpleNamespace(record_stream=marked.append, numel=lambda: 1 << 20)
    for s in (a, a, b, b, a):
        cur[0] = s
        with sc.use():
            pass
    assert a.waited[0].recorded_on[-1] is b and len(a.waited) == 1, "A's second turn did not wait for B's use"
    assert len(b.waited) == 1 and a in b.waited[0].recorded_on, "B did not wait for A's last use"
    assert marked == [a, b], f"record_stream calls: {marked}"


def test_calls_on_another_stream_keep_their_tensors(monkeypatch):
    # gemv/decode enqueued on a stream that is not the current one: that
    # stream first waits for the current one (x was made there), and every
    # tensor the kernel uses, the bf16 copy of x a temporary among them, is
    # record_stream'ed for it, or the allocator could reuse its memory while
    # the kernel runs; on the current stream, neither
    import types
    cg = ckhf._cg
    cur, other = _FakeStream(1), _FakeStream(2)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: cur)
    kept = []
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda t, s: kept.append((t, s)))
    calls = []

    class Lib:
        def ckg_tensor_gemv_path(self, h, x):   # the fused kernel: no warning
            return 0

        def ckg_tensor_gemv(self, h, x, batch, y, ot, stream):
            calls.append(("gemv", stream))
            return 0

        def ckg_tensor_decode(self, h, out, n, stream):
            calls.append(("decode", stream))
            return 0
    t = object.__new__(cg.DeviceTensor)
    t._lib, t._h, t.rows, t.cols, t.device = Lib(), 1, 24, 1024, None
    t.info, t.shape, t.nbytes = types.SimpleNamespace(name="w", dtype="BF16"), (24, 1024), 24 * 1024 * 2
    x = torch.zeros(2, 1024, device="meta")                 # float32: gemv makes a bf16 copy
    y = t.gemv(x, stream=other)
    assert calls == [("gemv", 2)] and other.waited == [cur]
    assert len(kept) == 2 and kept[0][0].dtype == torch.bfloat16 and kept[1][0] is y
    assert all(s is other for _, s in kept)
    out = torch.empty(24, 1024, dtype=torch.bfloat16, device="meta")
    t.decode(out=out, stream=other)
    assert calls[-1] == ("decode", 2) and kept[-1] == (out, other) and other.waited == [cur, cur]
    kept.clear()
    t.gemv(x)
    t.decode(out=out, stream=cur)
    assert calls[-2:] == [("gemv", 1), ("decode", 1)] and not kept and other.waited == [cur, cur] and not cur.waited


def test_device_count_asked_once(monkeypatch):
    # libckgpu's device count is a driver call: asked once, not per load
    cg = ckhf._cg
    n = []

    class Lib:
        def ckg_device_count(self):
            n.append(1)
            return 1
    monkeypatch.setattr(cg, "_lib", Lib())
    monkeypatch.setattr(cg, "_ndev", None)
    assert [cg.device_count() for _ in range(5)] == [1] * 5 and len(n) == 1
    cg.device_count(refresh=True)
    assert len(n) == 2
