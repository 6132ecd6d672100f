"""A Hugging Face hub cache packed with --delete-source and mounted where
huggingface_hub looks (HF_HUB_CACHE, or HF_HOME/hub), offline.

The cache is laid out as huggingface_hub's file_download writes it (its
cache layout documentation): models--ORG--NAME/blobs/<sha256> for the LFS
files (safetensors shards) and <git blob sha1> for the others,
refs/main, snapshots/<commit>/<file> a relative link into ../../blobs/.
Two revisions share the shards (one blob each); scan_cache_dir() on the
original must find it valid, and from_pretrained must load from it, before
it is packed.  Truth is the original cache, read by the same calls in a
child process (hf_cache_probe.py: huggingface_hub reads its environment at
import): after `pack --delete-source` (which leaves the cache without a
file or a link, and whose summary counts each blob once; verify --against a
copy of the cache compares the links' targets) and a mount,
from_pretrained("ORG/NAME") gives the same tensors and logits bit for bit,
snapshot_download(local_files_only=True) and hf_hub_download the same
files, readlink the original targets, scan_cache_dir() the same repos and
revisions; the safetensors blobs, which have no .safetensors name, were
recognised by their content (manifest kind, K15 extents)."""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("huggingface_hub")

from conftest import Mount  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from tiny_llama import tiny_llama  # noqa: E402

REPO, ORG_NAME = "ckptfs/tiny-llama", "models--ckptfs--tiny-llama"
REV_OLD, REV_MAIN = "1" * 40, "c0ffee" + "0" * 34


def git_blob_sha1(b):
    return hashlib.sha1(b"blob %d\0" % len(b) + b).hexdigest()


def make_cache(hub, saved):
    """hub/ORG_NAME for the files of saved (a save_pretrained directory):
    REV_MAIN holds them all, REV_OLD the same shards with an older config."""
    repo = os.path.join(hub, ORG_NAME)
    for sub in ("blobs", "refs"):
        os.makedirs(os.path.join(repo, sub))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(REV_MAIN)
    with open(os.path.join(saved, "config.json"), "rb") as f:
        old_config = f.read().replace(b'"use_cache": true', b'"use_cache": false')
    for rev, changed in ((REV_MAIN, {}), (REV_OLD, {"config.json": old_config})):
        snap = os.path.join(repo, "snapshots", rev)
        os.makedirs(snap)
        for name in sorted(os.listdir(saved)):
            with open(os.path.join(saved, name), "rb") as f:
                data = changed.get(name, f.read())
            lfs = name.endswith(".safetensors")
            h = hashlib.sha256(data).hexdigest() if lfs else git_blob_sha1(data)
            blob = os.path.join(repo, "blobs", h)
            if not os.path.exists(blob):
                with open(blob, "wb") as f:
                    f.write(data)
            os.symlink(os.path.join("..", "..", "blobs", h), os.path.join(snap, name))
    return repo


def entries(d):
    """{rel: ("link", target) | ("file", sha256)} below d (directories left out)."""
    out = {}
    for root, dirs, files in os.walk(d):
        for n in files + [x for x in dirs if os.path.islink(os.path.join(root, x))]:
            p = os.path.join(root, n)
            if os.path.islink(p):
                out[os.path.relpath(p, d)] = ("link", os.readlink(p))
            else:
                with open(p, "rb") as f:
                    out[os.path.relpath(p, d)] = ("file", hashlib.sha256(f.read()).hexdigest())
    return out


def kinds_of(packed):
    with open(os.path.join(packed, "ckptfs.manifest"), "rb") as f:
        return {e["path"]: e["kind"] for e in json.loads(f.read().split(b"\n", 1)[1])["files"]}


def probe(env_key, env_value):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update({env_key: env_value, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "HF_HUB_DISABLE_TELEMETRY": "1"})
    r = subprocess.run([sys.executable, os.path.join(HERE, "hf_cache_probe.py"), REPO, "config.json"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=240)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    return json.loads(r.stdout.decode().strip().splitlines()[-1])


def test_hub_cache_packed_with_delete_source_serves_from_pretrained(ckptfs, workdir):
    saved, hub = os.path.join(workdir, "hf-saved"), os.path.join(workdir, "hf-home", "hub")
    tiny_llama(2701).save_pretrained(saved, max_shard_size="100KB", safe_serialization=True)
    assert len([n for n in os.listdir(saved) if n.endswith(".safetensors")]) >= 3
    make_cache(hub, saved)
    before = entries(hub)
    truth = probe("HF_HUB_CACHE", hub)  # the original cache: valid, and loads
    assert not truth["warnings"] and truth["scan"][0]["repo_id"] == REPO, truth["scan"]
    assert truth["snapshot"] == os.path.join(ORG_NAME, "snapshots", REV_MAIN)
    blob_bytes = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(hub) for f in fs
                     if not os.path.islink(os.path.join(r, f)))

    copy = os.path.join(workdir, "hf-copy")
    shutil.copytree(hub, copy, symlinks=True)
    packed = os.path.join(workdir, "hf-packed")
    r = subprocess.run([ckptfs, "pack", "--delete-source", hub, packed], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    assert entries(hub) == {}, "the cache still holds %s" % sorted(entries(hub))
    # every blob once: the summary's original bytes are the blobs' (and refs'), not twice them
    n_files = sum(1 for k, v in before.items() if v[0] == "file")
    m = re.search(r"packed (\d+) files: ", r.stdout)
    assert m and int(m.group(1)) == n_files, r.stdout
    st = json.loads(subprocess.check_output([ckptfs, "stat", "--json", packed]))
    n_links = sum(1 for v in before.values() if v[0] == "link")
    assert st["files"] == n_files and st["links"] == n_links and st["original_bytes"] == blob_bytes, (blob_bytes, st)
    assert all("k15" in f["encodings"] for f in st["by_file"] if kinds_of(packed).get(f["path"]) == "safetensors")
    with open(os.path.join(packed, "ckptfs.manifest"), "rb") as f:
        man = json.loads(f.read().split(b"\n", 1)[1])
    kinds = {e["path"]: e["kind"] for e in man["files"]}
    for rel, (kind, _) in before.items():
        if rel.startswith(os.path.join(ORG_NAME, "blobs")):
            target = [t for p, (k, t) in before.items() if k == "link" and t.endswith(os.path.basename(rel))]
            is_st = any(p.endswith(".safetensors") for p, (k, t) in before.items() if k == "link" and
                        t.endswith(os.path.basename(rel)))
            assert kinds[rel] == ("safetensors" if is_st else "blob"), (rel, kinds[rel], target)
    assert {e["path"]: e["target"] for e in man["links"]} == {k: v[1] for k, v in before.items() if v[0] == "link"}

    # verify --against compares the links' targets too
    r = subprocess.run([ckptfs, "verify", "--against", copy, packed], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    link = os.path.join(copy, ORG_NAME, "snapshots", REV_OLD, "config.json")
    os.unlink(link)
    os.symlink("../../blobs/elsewhere", link)
    r = subprocess.run([ckptfs, "verify", "--against", copy, packed], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert r.returncode == 4 and "config.json: the source's link has another target" in r.stderr, r.stderr

    for key, mnt, value in (("HF_HUB_CACHE", os.path.join(workdir, "hf-mnt"), None),
                            ("HF_HOME", os.path.join(workdir, "hf-home2", "hub"), os.path.join(workdir, "hf-home2"))):
        with Mount(ckptfs, packed, mnt):
            assert entries(mnt) == before  # links with their targets, blobs with their bytes
            got = probe(key, value or mnt)
            for k in ("state", "logits", "snapshot", "files", "file", "scan", "warnings"):
                assert got[k] == truth[k], "%s through the mount (%s) differs: %s" % (k, key, got[k])
