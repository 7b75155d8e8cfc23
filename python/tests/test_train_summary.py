"""The summary of a run its callback stopped says what it trained, how fast,
and which checkpoint the stop wrote, as a finished run's does.  Runs under
pytest or as a plain script; CLASSIC_LIB points at libclassic.so."""
import os
import struct
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import classic  # noqa: E402

_RECIPE = """dataset: imagefolder
model: resnet18
image_size: 32
batch_size: 4
val_split: ""
num_parallel_workers: 0
per_print_times: 1
log_level: error
"""


def _png(path, shade, h=20, w=24):
    """Writes an h x w RGB PNG of a gradient over shade."""
    rows = b"".join(
        b"\0" + bytes((shade + 3 * y + x + 40 * k) % 256
                      for x in range(w) for k in range(3))
        for y in range(h))

    def chunk(t, d):
        return (struct.pack(">I", len(d)) + t + d +
                struct.pack(">I", zlib.crc32(t + d) & 0xffffffff))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" +
                chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def _folder(tmp):
    root = os.path.join(tmp, "data")
    for cls, shade in (("dark", 10), ("light", 150)):
        d = os.path.join(root, "train", cls)
        os.makedirs(d)
        for i in range(6):
            _png(os.path.join(d, "%d.png" % i), shade + 9 * i)
    return root


def test_a_stopped_run_reports_its_checkpoint_and_speed():
    tmp = tempfile.mkdtemp(prefix="classic-py-stop-")
    run = os.path.join(tmp, "run")
    s = classic.train(_RECIPE, data_dir=_folder(tmp), epoch_size=3,
                      ckpt_save_dir=run,
                      on_progress=lambda p: p["step"] >= 2)
    assert s["stopped"] and s["steps"] == 2
    ck = s["last_checkpoint"]
    assert ck.endswith("-s2.safetensors"), s
    assert os.path.exists(ck), s
    assert s["seconds"] > 0 and s["img_per_s"] > 0, s
    assert s["last_loss"] > 0, s


if __name__ == "__main__":
    test_a_stopped_run_reports_its_checkpoint_and_speed()
    print("ok")
