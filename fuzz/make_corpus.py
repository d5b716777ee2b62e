#!/usr/bin/python3
"""Writes the seed corpus of wire_fuzz into fuzz/corpus/wire/ (checked in; rerun after a format
change). Each seed is one input: frame prefixes, msgpack values of every type troupe reads, and
request, response and event bodies, as troupe writes them."""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "wire")


def mp_str(s):
    b = s.encode()
    if len(b) < 32:
        return bytes([0xA0 | len(b)]) + b
    if len(b) < 256:
        return b"\xd9" + bytes([len(b)]) + b
    return b"\xda" + struct.pack(">H", len(b)) + b


def mp_arr(items):
    head = bytes([0x90 | len(items)]) if len(items) < 16 else b"\xdc" + struct.pack(">H", len(items))
    return head + b"".join(items)


def mp_map(pairs):
    head = bytes([0x80 | len(pairs)]) if len(pairs) < 16 else b"\xde" + struct.pack(">H", len(pairs))
    return head + b"".join(mp_str(k) + v for k, v in pairs)


def mp_int(v):
    if 0 <= v < 128:
        return bytes([v])
    if -32 <= v < 0:
        return struct.pack("b", v)
    if -(2**31) <= v < 2**31:
        return b"\xd2" + struct.pack(">i", v)
    return b"\xd3" + struct.pack(">q", v)


ATT0 = b"\xd6\x01" + struct.pack(">I", 0)  # attachment reference, index 0
ATT1 = b"\xd6\x01" + struct.pack(">I", 1)


def header(kind, rid, body, sizes=()):
    out = b"TRP1" + bytes([1, kind]) + b"\0\0" + struct.pack("<QII", rid, body, len(sizes))
    return out + b"".join(struct.pack("<Q", s) for s in sizes)


values = {
    "nil": b"\xc0",
    "bools": mp_arr([b"\xc2", b"\xc3"]),
    "ints": mp_arr([mp_int(v) for v in (0, 1, 127, -1, -32, -33, 300, -70000, 2**40, -(2**40))]
                   + [b"\xcc\xff", b"\xcd\xff\xff", b"\xce\xff\xff\xff\xff",
                      b"\xcf" + struct.pack(">Q", 2**63 - 1)]),
    "uint64_too_big": b"\xcf" + struct.pack(">Q", 2**63),
    "floats": mp_arr([b"\xcb" + struct.pack(">d", 1.5), b"\xca" + struct.pack(">f", -2.25),
                      b"\xcb" + struct.pack(">d", float("nan"))]),
    "strings": mp_arr([mp_str(""), mp_str("x" * 31), mp_str("y" * 200), mp_str("z" * 300)]),
    "bin": b"\xc4\x03abc",
    "nested": mp_map([("a", mp_arr([mp_map([("b", mp_arr([mp_int(1)]))])])), ("c", b"\xc0")]),
    "deep": b"\x91" * 70 + b"\xc0",
    "attachments": mp_map([("x", ATT0), ("y", ATT1)]),
    "attachment_out_of_range": b"\xd6\x01\x00\x00\x00\x07",
    "huge_array_claim": b"\xdd\xff\xff\xff\xff",
    "huge_str_claim": b"\xdb\xff\xff\xff\xff",
    "map_int_key": b"\x81\x01\x02",
    "reserved_c1": b"\xc1",
    "truncated": mp_map([("abc", mp_str("defg"))])[:-2],
}
bodies = {
    "request": mp_arr([mp_str("echo"), mp_map([("x", mp_int(42)), ("s", mp_str("hello")),
                                               ("b", ATT0)])]),
    "response_ok": mp_arr([b"\xc3", mp_arr([mp_int(1), mp_str("two")])]),
    "response_error": mp_arr([b"\xc2", mp_arr([mp_str("kProtocol"), mp_str("bad frame")])]),
    "event": mp_arr([mp_str("worker_died"), mp_map([("rank", mp_int(3))])]),
}
frames = {
    "frame_request": header(5, 1, len(bodies["request"]), [1]) + bodies["request"] + b"a",
    "frame_auth": header(2, 0, 64) + b"n" * 64,
    "frame_huge_body": header(5, 2, 2**32 - 1),
    "frame_many_attachments": header(5, 3, 0, [2**30] * 8),
    "frame_bad_magic": b"TRP2" + header(5, 1, 0)[4:],
    "frame_bad_kind": header(9, 1, 0),
}

os.makedirs(OUT, exist_ok=True)
for group in (values, bodies, frames):
    for name, data in group.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
print(f"wrote {len(values) + len(bodies) + len(frames)} seeds to {OUT}")
