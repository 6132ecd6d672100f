"""transformers' from_pretrained on a ckptfs mount: a tiny LlamaForCausalLM
saved in bf16 as an index.json and several shards, packed (k15 and
bytesplit) and mounted, loads to the same state dict, bit for bit, and gives
the same logits as the original directory."""
import json
import os
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from conftest import mount_fixture, pack  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tiny_llama import tiny_llama  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def load(path):
    from transformers import LlamaForCausalLM
    kw = {"attn_implementation": "eager"}
    try:
        m = LlamaForCausalLM.from_pretrained(path, dtype=torch.bfloat16, **kw)
    except TypeError:       # transformers < 4.56 knows only torch_dtype
        m = LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16, **kw)
    return m.eval()


@pytest.fixture(scope="module")
def model_dir(workdir):
    d = os.path.join(workdir, "llama-src")
    tiny_llama(1130).save_pretrained(d, max_shard_size="100KB", safe_serialization=True)
    return d


@pytest.fixture(scope="module", params=["k15", "bytesplit"])
def mounted(request, ckptfs, workdir, model_dir):
    dst = pack(ckptfs, model_dir, os.path.join(workdir, "llama-dst-" + request.param), request.param)
    yield from mount_fixture(ckptfs, dst, dst + ".mnt", "cache_size=8M")


def test_model_is_sharded(model_dir):
    shards = [f for f in os.listdir(model_dir) if f.endswith(".safetensors")]
    assert len(shards) >= 3, shards
    with open(os.path.join(model_dir, "model.safetensors.index.json")) as f:
        assert set(json.load(f)["weight_map"].values()) == set(shards)


def test_from_pretrained_same_weights_and_logits(model_dir, mounted):
    assert sorted(os.listdir(mounted.path)) == sorted(os.listdir(model_dir))
    a, b = load(model_dir), load(mounted.path)
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sb) == list(sa)
    for k in sa:
        assert sb[k].dtype == sa[k].dtype == torch.bfloat16, k
        assert sb[k].shape == sa[k].shape, k
        assert torch.equal(sb[k].contiguous().view(torch.int16), sa[k].contiguous().view(torch.int16)), k
    ids = torch.randint(0, 512, (2, 24), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        la, lb = a(ids).logits, b(ids).logits
    assert torch.isfinite(la.float()).all()
    assert torch.equal(la.view(torch.int16), lb.view(torch.int16))
