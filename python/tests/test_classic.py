"""Tests of the Python module: train a tiny model with a callback, stop a
run, classify paths and arrays (equal to `classic predict`), embeddings,
evaluation of a split (equal to `classic eval`) and errors.  Runs under pytest or as a plain script (`python3 test_classic.py`).
CLASSIC_LIB points at libclassic.so; CLASSIC_BIN at the classic binary for
the comparison with the CLI (skipped without it)."""
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import classic  # noqa: E402

_TMP = tempfile.mkdtemp(prefix="classic-py-")
_RUN = {}


def _png(path, img):
    """Writes an (H, W, 3) uint8 array as an RGB PNG."""
    h, w, _ = img.shape
    rows = b"".join(b"\0" + img[y].tobytes() for y in range(h))

    def chunk(t, d):
        return (struct.pack(">I", len(d)) + t + d +
                struct.pack(">I", zlib.crc32(t + d) & 0xffffffff))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" +
                chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def _picture(shade, h=36, w=40):
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(shade + 3 * y + x + 40 * k) % 256 for k in range(3)], -1)
    return img.astype(np.uint8)


def _folder():
    root = os.path.join(_TMP, "data")
    if not os.path.isdir(root):
        for split, n in (("train", 8), ("val", 4)):
            for cls, shade in (("dark", 10), ("light", 150)):
                d = os.path.join(root, split, cls)
                os.makedirs(d)
                for i in range(n // 2):
                    _png(os.path.join(d, "%d.png" % i), _picture(shade + i))
    return root


_RECIPE = """dataset: imagefolder
model: resnet18
image_size: 32
batch_size: 4
val_split: val
num_parallel_workers: 0
per_print_times: 1
log_level: error
"""


def _trained():
    if "summary" not in _RUN:
        events = []
        _RUN["summary"] = classic.train(
            _RECIPE, data_dir=_folder(), epoch_size=2,
            ckpt_save_dir=os.path.join(_TMP, "run"),
            on_progress=lambda p: events.append(p))
        _RUN["events"] = events
    return _RUN["summary"]


def test_train_reports_progress():
    s = _trained()
    events = _RUN["events"]
    steps = [e for e in events if e["kind"] == "step"]
    epochs = [e for e in events if e["kind"] == "epoch"]
    assert len(steps) == 4 and len(epochs) == 2
    assert all(e["lr"] > 0 and e["loss"] > 0 for e in steps)
    assert epochs[-1]["evaluated"] and 0 <= epochs[-1]["val_top1"] <= 1
    assert s["steps"] == 4 and s["epochs"] == 2 and not s["stopped"]
    assert os.path.exists(s["last_checkpoint"])


def test_train_stops_when_the_callback_says():
    s = classic.train(_RECIPE, data_dir=_folder(), epoch_size=3,
                      ckpt_save_dir=os.path.join(_TMP, "stop"),
                      on_progress=lambda p: p["step"] >= 2)
    assert s["stopped"] and s["steps"] == 2


def test_train_errors_raise_with_the_sentence():
    try:
        classic.train(_RECIPE, batch_sise=4)
    except classic.ClassicError as e:
        assert e.name == "CL_ERR_CONFIG" and "batch_sise" in str(e)
    else:
        raise AssertionError("an unknown key trained")

    def boom(p):
        raise KeyError("from the callback")
    try:
        classic.train(_RECIPE, data_dir=_folder(), epoch_size=1,
                      ckpt_save_dir=os.path.join(_TMP, "boom"),
                      on_progress=boom)
    except KeyError as e:
        assert "from the callback" in str(e)
    else:
        raise AssertionError("the callback's exception was lost")


def test_predict_paths_and_arrays():
    ck = _trained()["last_checkpoint"]
    with classic.Model(ck) as m:
        assert m.num_classes == 2 and m.classes == ["dark", "light"]
        img = _picture(77)
        path = os.path.join(_TMP, "pic.png")
        _png(path, img)
        p_file, name = m.predict(path)
        assert p_file.shape == (2,) and abs(p_file.sum() - 1) < 1e-5
        assert name in m.classes
        p_arr, _ = m.predict(img)
        assert np.array_equal(p_file, p_arr)
        p_flt = m.probabilities(img.astype(np.float64) / 255)
        assert np.array_equal(p_file, p_flt)
        probs, names = m.predict([path, img, img[:, :, 0]])
        assert probs.shape == (3, 2) and len(names) == 3
        assert np.array_equal(probs[0], probs[1])
        # Batches run on a network planned for several images: equal to
        # rounding.
        batch = m.probabilities(np.stack([img, img]))
        assert batch.shape == (2, 2) and np.allclose(batch[0], p_file,
                                                     atol=1e-5)
        files = m.probabilities([path] * 20)
        assert files.shape == (20, 2) and np.allclose(files, p_file,
                                                      atol=1e-5)
        top = m.top_k(path, 5)
        assert len(top) == 2 and top[0][1] >= top[1][1]
        assert top[0][0] == m.classes[top[0][2]]
        # The module's predictions equal the CLI's on the same file.
        exe = os.environ.get("CLASSIC_BIN")
        if exe:
            out = subprocess.run([exe, "predict", "--checkpoint", ck,
                                  "--json", "--top", "2", path],
                                 check=True, capture_output=True, text=True)
            cli = json.loads(out.stdout)[0]["top"]
            for (name_, prob, idx), c in zip(top, cli):
                assert idx == c["index"] and name_ == c["class"]
                assert abs(prob - c["prob"]) < 1e-6


def test_embed():
    with classic.Model(_trained()["last_checkpoint"]) as m:
        img = _picture(5)
        path = os.path.join(_TMP, "emb.png")
        _png(path, img)
        e = m.embed(path)
        assert e.shape == (m.embed_dim,) == (512,)
        assert np.array_equal(e, m.embed(img))
        two = m.embed([img, img])
        assert two.shape == (2, 512) and np.allclose(two[1], e, atol=1e-4)
        files = m.embed([path] * 3)
        assert files.shape == (3, 512) and np.allclose(files, e, atol=1e-4)
        assert np.isfinite(e).all()


def test_evaluate_a_split():
    ck = _trained()["last_checkpoint"]
    gallery = os.path.join(_TMP, "gallery.safetensors")
    r = classic.evaluate(ck, batch=3, features=True, gallery=gallery)
    assert r["samples"] == 4 and r["classes"] == ["dark", "light"]
    assert r["confusion"].shape == (2, 2) and r["confusion"].sum() == 4
    assert abs(r["top1"] - np.trace(r["confusion"]) / 4) < 1e-12
    assert r["features"].shape == (4, 512) and list(r["labels"]) == [0, 0, 1, 1]
    assert os.path.getsize(gallery) > 4 * 512 * 4
    # The split's first image, alone, gives the same features.
    with classic.Model(ck) as m:
        first = os.path.join(_folder(), "val", "dark", "0.png")
        assert np.abs(m.embed(first) - r["features"][0]).max() < 1e-4
    # The CLI prints the same counts.
    exe = os.environ.get("CLASSIC_BIN")
    if exe:
        out = subprocess.run([exe, "eval", "--checkpoint", ck],
                             check=True, capture_output=True, text=True)
        assert "(4 samples)" in out.stdout
        assert "%.2f%%" % (100 * r["top1"]) in out.stdout
    try:
        classic.evaluate(ck, split="nowhere")
    except classic.ClassicError as e:
        assert "nowhere" in str(e)
    else:
        raise AssertionError("a missing split evaluated")


def test_errors_raise_with_the_sentence():
    try:
        classic.Model(os.path.join(_TMP, "missing.safetensors"))
    except classic.ClassicError as e:
        assert "missing.safetensors" in str(e) and e.status < 0
    else:
        raise AssertionError("a missing file opened")
    m = classic.Model(_trained()["last_checkpoint"])
    for bad, what in ((np.zeros((8, 8, 2), np.uint8), "2 channels"),
                      (np.zeros((0, 8, 3), np.uint8), "0 x 8"),
                      (os.path.join(_TMP, "no.png"), "no.png")):
        try:
            m.predict(bad)
        except classic.ClassicError as e:
            assert what in str(e), str(e)
        else:
            raise AssertionError("%s classified" % what)
    try:
        m.predict(np.zeros((8, 8, 3), np.int32))
    except ValueError as e:
        assert "int32" in str(e)
    else:
        raise AssertionError("an int32 image classified")
    m.close()
    try:
        m.predict(np.zeros((8, 8, 3), np.uint8))
    except classic.ClassicError as e:
        assert "closed" in str(e)
    else:
        raise AssertionError("a closed model classified")


if __name__ == "__main__":
    failed = 0
    for name, fn in sorted(globals().items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                print("ok   %s" % name)
            except Exception as e:  # report every test, then fail
                failed += 1
                print("FAIL %s: %r" % (name, e))
    print("%d failed" % failed)
    sys.exit(1 if failed else 0)


def _bf16_native():
    """Whether oneDNN runs bf16 dot products here: `classic check`'s cpu
    isa when the binary is known (it honours ONEDNN_MAX_CPU_ISA), else the
    CPU's flags."""
    exe = os.environ.get("CLASSIC_BIN")
    if exe:
        out = subprocess.run([exe, "check"], check=True, capture_output=True,
                             text=True).stdout
        isa = [ln.split()[-1] for ln in out.splitlines()
               if ln.startswith("cpu isa")][0]
        return "bf16" in isa or "amx" in isa
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def test_precision():
    ck = _trained()["last_checkpoint"]
    img = _picture(9)
    with classic.Model(ck) as m:
        assert m.precision == "f32"
        p32, e32 = m.probabilities(img), m.embed(img)
    if _bf16_native():
        with classic.Model(ck, precision="bf16") as m:
            assert m.precision == "bf16"
            pb, eb = m.probabilities(img), m.embed(img)
        rel = np.linalg.norm(eb - e32) / np.linalg.norm(e32)
        assert 1e-5 < rel < 0.08, rel
        assert np.abs(pb - p32).max() < 0.05
        r = classic.evaluate(ck, batch=3, precision="bf16")
        assert r["samples"] == 4
    else:
        for call in (lambda: classic.Model(ck, precision="bf16"),
                     lambda: classic.evaluate(ck, precision="bf16")):
            try:
                call()
            except classic.ClassicError as e:
                assert "avx512_bf16" in str(e), str(e)
            else:
                raise AssertionError("bf16 ran without bf16 dot products")
    for call in (lambda: classic.Model(ck, precision="fp16"),
                 lambda: classic.evaluate(ck, precision="fp16"),
                 lambda: classic.evaluate(ck, amp="O2")):
        try:
            call()
        except classic.ClassicError as e:
            assert "fp16" in str(e) or "amp_level" in str(e), str(e)
        else:
            raise AssertionError("a bad precision was taken")


def test_rgba_arrays_and_the_namespace():
    # An RGBA array is classified as its RGB part, as an RGBA PNG is.
    rgb = _picture(20)
    alpha = np.full(rgb.shape[:2] + (1,), 7, np.uint8)
    rgba = np.concatenate([rgb, alpha], axis=2)
    with classic.Model(_trained()["last_checkpoint"]) as m:
        assert np.array_equal(m.probabilities(rgba), m.probabilities(rgb))
        two = m.probabilities(np.stack([rgba, rgba]))
        assert np.allclose(two[0], m.probabilities(rgb), atol=1e-5)
    # Only the API is public: no numpy, os or ctypes under classic.
    public = sorted(n for n in dir(classic) if not n.startswith("_"))
    assert public == sorted(classic.__all__), public
