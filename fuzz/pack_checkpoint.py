#!/usr/bin/env python3
"""Packs a checkpoint directory into one fuzz_checkpoint input (the bundle of
fuzz/checkpoint_check.h): flags byte, then per file: name length, name, 4-byte LE size, data.

usage: fuzz/pack_checkpoint.py DIR OUT [--refresh]
--refresh sets flag bit 0 (the target rewrites the manifest's checksums before loading)."""
import os
import struct
import sys


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    if len(args) != 2 or any(a not in ("--refresh",) for a in argv[1:] if a.startswith("--")):
        print(__doc__, file=sys.stderr)
        return 2
    directory, out = args
    names = sorted(n for n in os.listdir(directory) if n == "manifest.json" or n.startswith("zero3_rank"))
    # Rank files first, the manifest last: as a save writes them.
    names.sort(key=lambda n: n == "manifest.json")
    blob = bytearray([1 if "--refresh" in argv else 0])
    for name in names:
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        encoded = name.encode()
        blob += bytes([len(encoded)]) + encoded + struct.pack("<I", len(data)) + data
    with open(out, "wb") as f:
        f.write(blob)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
