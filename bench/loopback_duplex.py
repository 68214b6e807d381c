#!/usr/bin/env python3
"""The physical floor of a 2-node open on one host (issue 22, P1): two
processes each send --bytes to the other over one loopback TCP connection
while receiving as many, both directions at once, into buffers whose pages
are mapped (as a pooled session copy's are).

    scripts/python bench/loopback_duplex.py --bytes 134217728 --iters 11

A 2x2 open of 256 MiB moves exactly this between its two daemons (each
receives the other node's 128 MiB half); no memcpy of the node's own half is
in it. Prints the median and min over --iters (after one warmup) of the
time from a shared start until both processes have sent and received
everything, as process 0 saw it.
"""

import argparse
import multiprocessing as mp
import socket
import statistics
import threading
import time

CHUNK = 1 << 20  # 1 MiB per send/recv call, like the other TCP anchors.


def send_all(sock: socket.socket, data: memoryview) -> None:
    for at in range(0, len(data), CHUNK):
        sock.sendall(data[at:at + CHUNK])


def recv_all(sock: socket.socket, into: memoryview) -> None:
    at = 0
    while at < len(into):
        got = sock.recv_into(into[at:at + CHUNK])
        if got == 0:
            raise ConnectionError("peer closed mid-transfer")
        at += got


def one_side(sock: socket.socket, nbytes: int, iters: int,
             start: mp.Barrier) -> list:
    out = memoryview(bytearray(b"\x01" * nbytes))  # Pages mapped: written.
    into = memoryview(bytearray(b"\x00" * nbytes))
    times = []
    for _ in range(1 + iters):
        start.wait()
        began = time.perf_counter()
        sender = threading.Thread(target=send_all, args=(sock, out))
        sender.start()
        recv_all(sock, into)
        sender.join()
        start.wait()  # Both sides done: the time is the slower side's.
        times.append((time.perf_counter() - began) * 1e3)
    assert into[0] == 1 and into[-1] == 1
    return times[1:]


def peer(port: int, nbytes: int, iters: int, start: mp.Barrier) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    one_side(sock, nbytes, iters, start)
    sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bytes", type=int, default=128 << 20,
                        help="bytes each side sends (and receives)")
    parser.add_argument("--iters", type=int, default=11)
    args = parser.parse_args()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    start = mp.Barrier(2)
    other = mp.Process(target=peer, args=(listener.getsockname()[1],
                                          args.bytes, args.iters, start))
    other.start()
    sock, _ = listener.accept()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = one_side(sock, args.bytes, args.iters, start)
    other.join()
    sock.close()
    listener.close()
    print(f"duplex loopback TCP, {args.bytes} B each way: "
          f"median {statistics.median(times):.1f} ms, "
          f"min {min(times):.1f} ms over {args.iters}")


if __name__ == "__main__":
    main()
