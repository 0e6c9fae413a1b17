"""A tiny PNG reader (8-bit RGB/RGBA, not interlaced) for screenshot tests: zlib and the five row filters."""

from __future__ import annotations

import struct
import zlib


def read_png(path) -> tuple[int, int, int, bytes]:
    """(width, height, channels, raw pixel bytes row-major)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, f"unsupported PNG: depth {depth}, colour type {color}"
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    out = bytearray(height * stride)
    prev = bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out[y * stride : (y + 1) * stride] = line
        prev = line
    return width, height, channels, bytes(out)


def colour_summary(path, step: int = 3) -> tuple[float, int, int]:
    """(share of the most common colour, number of distinct colours, share of dark pixels), on every `step`-th pixel."""
    width, height, channels, px = read_png(path)
    counts: dict[bytes, int] = {}
    dark = total = 0
    for y in range(0, height, step):
        row = y * width * channels
        for x in range(0, width, step):
            i = row + x * channels
            rgb = px[i : i + 3]
            counts[rgb] = counts.get(rgb, 0) + 1
            dark += sum(rgb) < 200
            total += 1
    return max(counts.values()) / total, len(counts), dark / total
