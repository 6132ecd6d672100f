"""hf_cache_probe.py REPO FILE — what huggingface_hub and transformers see of
the hub cache that the environment names (HF_HUB_CACHE, or HF_HOME/hub),
offline (HF_HUB_OFFLINE=1), printed as one JSON object:
  state:    SHA-256 of every tensor's bytes of from_pretrained(REPO);
  logits:   SHA-256 of the logits of a fixed input;
  snapshot: snapshot_download(REPO, local_files_only=True), and the files
            under it with their links' targets (readlink) and contents' SHA-256;
  file:     SHA-256 of hf_hub_download(REPO, FILE);
  scan:     scan_cache_dir()'s repos: id, revisions (commit, refs, files),
            size_on_disk, and its warnings.
Run in a child process by test_hf_cache.py: huggingface_hub reads its
environment once, at import."""
import hashlib
import json
import os
import sys

import torch
from huggingface_hub import hf_hub_download, scan_cache_dir, snapshot_download
from transformers import AutoModelForCausalLM


def sha(b):
    return hashlib.sha256(b).hexdigest()


def main():
    repo, fname = sys.argv[1], sys.argv[2]
    try:
        m = AutoModelForCausalLM.from_pretrained(repo, dtype=torch.bfloat16, attn_implementation="eager")
    except TypeError:  # transformers < 4.56
        m = AutoModelForCausalLM.from_pretrained(repo, torch_dtype=torch.bfloat16, attn_implementation="eager")
    m.eval()
    state = {k: sha(v.contiguous().view(torch.uint8).numpy().tobytes()) for k, v in m.state_dict().items()}
    with torch.no_grad():
        logits = m(torch.arange(1, 17).view(1, 16)).logits
    snap = snapshot_download(repo, local_files_only=True)
    files = {}
    for root, _, fs in os.walk(snap):
        for f in fs:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                files[os.path.relpath(p, snap)] = {"link": os.readlink(p) if os.path.islink(p) else None,
                                                    "sha256": sha(fh.read())}
    with open(hf_hub_download(repo, fname), "rb") as fh:
        one = sha(fh.read())
    info = scan_cache_dir()
    scan = [{"repo_id": r.repo_id, "size_on_disk": r.size_on_disk,
             "revisions": sorted([rv.commit_hash, sorted(rv.refs), sorted(f.file_name for f in rv.files)]
                                 for rv in r.revisions)}
            for r in info.repos]
    print(json.dumps({"state": state, "logits": sha(logits.view(torch.uint8).numpy().tobytes()),
                      "snapshot": os.path.relpath(snap, os.environ.get("HF_HUB_CACHE") or
                                                  os.path.join(os.environ["HF_HOME"], "hub")),
                      "files": files, "file": one, "scan": scan,
                      "warnings": [str(w) for w in info.warnings]}))


if __name__ == "__main__":
    main()
