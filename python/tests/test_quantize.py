"""The Python module on an int8 file: a tiny model trained here, quantized
by `classic quantize` (CLASSIC_BIN), opened by classic.Model at its own
precision (int8) and at f32, and a bad calibration folder refused with its
sentence.  Runs under pytest or as a plain script."""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import classic  # noqa: E402

_TMP = tempfile.mkdtemp(prefix="classic-py-int8-")


def _picture(shade, h=36, w=40):
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(shade + 3 * y + x + 40 * k) % 256 for k in range(3)], -1)
    return img.astype(np.uint8)


def _write_png(path, img):
    import struct
    import zlib
    h, w, _ = img.shape
    rows = b"".join(b"\0" + img[y].tobytes() for y in range(h))

    def chunk(t, d):
        return (struct.pack(">I", len(d)) + t + d +
                struct.pack(">I", zlib.crc32(t + d) & 0xffffffff))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" +
                chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def _folder():
    root = os.path.join(_TMP, "data")
    for split, n in (("train", 8), ("val", 4)):
        for cls, shade in (("dark", 10), ("light", 150)):
            d = os.path.join(root, split, cls)
            os.makedirs(d, exist_ok=True)
            for i in range(n // 2):
                _write_png(os.path.join(d, "%d.png" % i), _picture(shade + i))
    return root


_RECIPE = """dataset: imagefolder
model: resnet18
image_size: 32
batch_size: 4
val_split: val
num_parallel_workers: 0
log_level: error
"""


def test_model_opens_an_int8_file():
    exe = os.environ.get("CLASSIC_BIN")
    if not exe:
        print("skipped: CLASSIC_BIN is not set (the classic binary runs "
              "classic quantize)")
        return
    data = _folder()
    s = classic.train(_RECIPE, data_dir=data, epoch_size=1,
                      ckpt_save_dir=os.path.join(_TMP, "run"))
    ck = s["last_checkpoint"]
    q = os.path.join(_TMP, "q.safetensors")
    subprocess.run([exe, "quantize", "--checkpoint", ck, "--calib", data,
                    "--samples", "8", "--out", q], check=True,
                   capture_output=True, text=True)
    img = _picture(77)
    with classic.Model(ck) as f32, classic.Model(q) as i8, \
            classic.Model(q, precision="f32") as deq:
        assert f32.precision == "f32"
        assert i8.precision == "int8" and deq.precision == "f32"
        assert i8.classes == f32.classes == ["dark", "light"]
        p = f32.probabilities(img)
        p8 = i8.probabilities(img)
        pd = deq.probabilities(img)
        assert np.isfinite(p8).all() and abs(p8.sum() - 1) < 1e-5
        # 8-bit weights and activations move the probabilities a little.
        assert np.abs(pd - p).max() < 0.1 and np.abs(p8 - p).max() < 0.1
        assert i8.embed(img).shape == (512,)
    # A folder without images is refused in one sentence, no file left.
    empty = os.path.join(_TMP, "empty")
    os.makedirs(empty)
    bad = os.path.join(_TMP, "bad.safetensors")
    r = subprocess.run([exe, "quantize", "--checkpoint", ck, "--calib",
                        empty, "--out", bad], capture_output=True, text=True)
    assert r.returncode != 0 and "the folder is empty" in r.stderr
    assert not os.path.exists(bad)


if __name__ == "__main__":
    test_model_opens_an_int8_file()
    print("ok")
