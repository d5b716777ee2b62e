"""Captures the frames crossing the test bridge (tests/netns/netns.sh) into a file, as a packet
capture tool would: a raw AF_PACKET socket on the bridge in promiscuous mode (so that frames
forwarded between the hosts' ports reach it, not only the bridge's own). Writes READY_FILE once
capturing, then appends every frame to OUT until SIGTERM, when it prints how many frames it
took and how many the kernel dropped (the socket's receive buffer was full): a capture with
drops proves nothing about the bytes it missed, so the caller checks that count.

    capture.py BRIDGE OUT READY_FILE

Then `capture.py --count OUT NEEDLE` prints how many times NEEDLE occurs in OUT, and
`capture.py --tls-records OUT` how many TLS 1.3 application-data record headers (17 03 03)."""

import signal
import socket
import struct
import sys

SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_STATISTICS = 6
SO_RCVBUFFORCE = 33
ETH_P_ALL = 0x0003
# Frames of a veth with segmentation offload reach 64 KiB plus headers.
MAX_FRAME = 1 << 18


def capture(bridge, out_path, ready_path):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((bridge, 0))
    index = socket.if_nametoindex(bridge)
    s.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP,
                 struct.pack("iHH8s", index, PACKET_MR_PROMISC, 0, b""))
    s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 256 << 20)

    def stop(*_):
        packets, drops = struct.unpack("II", s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        print(f"captured {packets} frames, {drops} dropped", flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    buf = bytearray(MAX_FRAME)
    with open(out_path, "wb", buffering=1 << 20) as out:
        with open(ready_path, "w") as ready:
            ready.write("capturing\n")
        while True:
            n = s.recv_into(buf)
            out.write(buf[:n])


def main():
    if sys.argv[1] == "--count":
        data = open(sys.argv[2], "rb").read()
        print(data.count(sys.argv[3].encode()))
    elif sys.argv[1] == "--tls-records":
        print(open(sys.argv[2], "rb").read().count(b"\x17\x03\x03"))
    else:
        capture(*sys.argv[1:4])


if __name__ == "__main__":
    main()
