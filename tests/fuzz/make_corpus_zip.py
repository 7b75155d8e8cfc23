#!/usr/bin/env python3
"""Seeds for the zip fuzz target (tests/fuzz/corpus/zip/): small archives of
the shapes the zip reader (src/interop/zip.c) tells apart: torch.save's
layout of stored entries, an end record with a comment, zip64 (saturated
central-directory fields with their extra field, the zip64 end record and
locator), empty and directory entries, data descriptors (Python's zipfile
on a stream it cannot seek), a deflated entry (refused), and the files
torch 1.13 wrote for the pth target (corpus/pth/*.file without their flags
byte).  Standard library only.
Usage: make_corpus_zip.py [OUT_DIR]"""
import io
import os
import struct
import sys
import zipfile
import zlib


def archive(entries, comment=b"", zip64=False, method=0):
    """A zip of (name, data) entries as torch.save lays them out; zip64
    saturates every size, offset and count the format lets it."""
    out = bytearray()
    cd = bytearray()
    for name, data in entries:
        name = name.encode()
        crc = zlib.crc32(data) & 0xFFFFFFFF
        body = data
        if method == 8:
            c = zlib.compressobj(9, zlib.DEFLATED, -15)
            body = c.compress(data) + c.flush()
        off = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0,
                           crc, len(body), len(data), len(name), 0)
        out += name + body
        if zip64:
            extra = struct.pack("<HHQQQ", 1, 24, len(data), len(body), off)
            sizes = (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
        else:
            extra = b""
            sizes = (len(body), len(data), off)
        cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, method,
                          0, 0, crc, sizes[0], sizes[1], len(name),
                          len(extra), 0, 0, 0, 0, sizes[2])
        cd += name + extra
    cd_off = len(out)
    out += cd
    n = len(entries)
    if zip64:
        z64 = len(out)
        out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n,
                           len(cd), cd_off)
        out += struct.pack("<IIQI", 0x07064B50, 0, z64, 1)
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF,
                           0xFFFFFFFF, 0xFFFFFFFF, len(comment))
    else:
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, len(cd),
                           cd_off, len(comment))
    return bytes(out + comment)


class Unseekable(io.RawIOBase):
    """A stream zipfile cannot seek back in: it writes data descriptors."""

    def __init__(self):
        self.buf = bytearray()

    def writable(self):
        return True

    def write(self, b):
        self.buf += b
        return len(b)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus",
                                                             "zip")
    os.makedirs(out, exist_ok=True)
    torch_like = [("archive/data.pkl", b"\x80\x02}q\x00."),
                  ("archive/byteorder", b"little"),
                  ("archive/data/0", bytes(range(16))),
                  ("archive/version", b"3\n")]
    seeds = {
        "torch": archive(torch_like),
        "comment": archive(torch_like[:2], comment=b"a comment"),
        "zip64": archive(torch_like, zip64=True),
        "empty_entries": archive([("x/", b""), ("x/data.pkl", b""),
                                  ("x/data/0", b"")]),
        "one": archive([("a", b"hello")]),
        "duplicate": archive([("a/b", b"1"), ("a/b", b"2")]),
        "deflated": archive([("archive/data.pkl", b"x" * 64)], method=8),
        "eocd_only": struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0, 0, 0, 0, 0),
    }
    s = Unseekable()
    with zipfile.ZipFile(s, "w", zipfile.ZIP_STORED) as z:
        for name, data in (("d/data.pkl", b"\x80\x02N."),
                           ("d/data/0", b"\x00" * 8)):
            # A fixed time, so that the seed is the same on every run.
            z.writestr(zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0)), data)
    seeds["descriptor"] = bytes(s.buf)
    for name, data in seeds.items():
        with open(os.path.join(out, name + ".zip"), "wb") as f:
            f.write(data)
    pth = os.path.join(here, "corpus", "pth")
    for f in sorted(os.listdir(pth)) if os.path.isdir(pth) else []:
        if f.endswith(".file"):
            raw = open(os.path.join(pth, f), "rb").read()
            with open(os.path.join(out, "torch113_" + f[:-5] + ".zip"),
                      "wb") as g:
                g.write(raw[1:])


if __name__ == "__main__":
    main()
