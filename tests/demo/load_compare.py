"""load_compare.py ORIG MOUNT — load the model from both directories with
transformers and compare every tensor bit for bit and the logits."""
import sys
import time

import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()  # the demo's story, not transformers' per-load bars


def load(path):
    t = time.perf_counter()
    m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
    return m.eval(), time.perf_counter() - t


def main(orig, mnt):
    load(orig)  # warm up imports and the page cache, so the timings compare loads
    a, ta = load(orig)
    b, tb = load(mnt)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys(), "different tensor names"
    for k in sa:
        x, y = sa[k], sb[k]
        assert x.dtype == y.dtype and x.shape == y.shape, k
        assert torch.equal(x.view(torch.int16) if x.dtype == torch.bfloat16 else x,
                           y.view(torch.int16) if y.dtype == torch.bfloat16 else y), f"{k} differs"
    ids = torch.arange(1, 33).unsqueeze(0)
    with torch.no_grad():
        la, lb = a(ids).logits, b(ids).logits
    assert torch.equal(la, lb), "logits differ"
    print(f"{len(sa)} tensors bit-identical, logits identical; "
          f"load time original {ta:.2f}s, mount {tb:.2f}s")


if __name__ == "__main__":
    main(*sys.argv[1:])
