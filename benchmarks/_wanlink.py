"""A user-space wide-area network for ``bench_wan.py``: TUN devices and a delay line.

This machine's kernel has no ``sch_netem`` (``tc`` knows ``htb``/``tbf`` here, nothing
that delays packets), so the links are emulated in one process instead: it runs in the
switch's network namespace, opens one TUN device per host, moves each device into its
host's namespace, and forwards every IPv4 packet from host ``i`` to host ``j`` after

* queueing on ``i``'s uplink and ``j``'s downlink, each served at the profile's rate
  (unbounded queues: no loss, so queueing shows up as delay, not retransmits), and
* a propagation delay of half the round-trip time (a quarter on each of the two links).

TCP runs end to end through it (the hosts' kernels see the real RTT, windows and slow
start). Packets are up to the TUN MTU (default 9000 bytes, jumbo frames: a Python
forwarder moves ~14k of them per second at 1 Gbit/s; at MTU 1500 it would need 83k).

Protocol on stdin: ``RATE_BITS_PER_S RTT_MS`` lines change the profile; EOF stops it.
It prints ``READY`` once every device exists in its host.
"""

from __future__ import annotations

import fcntl
import heapq
import itertools
import os
import select
import struct
import subprocess
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def main() -> None:
    subnet, mtu, hosts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    fds: list[int] = []
    for i, ns in enumerate(hosts):
        dev = f"t{i}"
        fds.append(open_tun(dev))
        for cmd in (
            ["ip", "link", "set", "dev", dev, "netns", ns],
            ["ip", "-n", ns, "link", "set", "dev", dev, "mtu", str(mtu), "up"],
            ["ip", "-n", ns, "addr", "add", f"{subnet}.{i + 1}/24", "dev", dev],
        ):
            subprocess.run(cmd, check=True)
    host_of = {fd: i for i, fd in enumerate(fds)}
    rate, delay = 1e9 / 8, 0.0  # bytes per second; seconds per link (a quarter RTT)
    up_free = [0.0] * len(fds)
    down_free = [0.0] * len(fds)
    due: list[tuple[float, int, int, bytes]] = []
    order = itertools.count()
    stdin = sys.stdin.fileno()
    print("READY", flush=True)
    while True:
        now = time.monotonic()
        timeout = None if not due else max(0.0, due[0][0] - now)
        readable, _, _ = select.select([stdin, *fds], [], [], timeout)
        for fd in readable:
            if fd == stdin:
                line = sys.stdin.readline()
                if not line:
                    return
                bits, rtt_ms = line.split()
                rate, delay = float(bits) / 8, float(rtt_ms) / 4000
                continue
            i = host_of[fd]
            for _ in range(256):  # drain what is queued, up to a batch
                try:
                    pkt = os.read(fd, 65536)
                except BlockingIOError:
                    break
                if len(pkt) < 20 or pkt[0] >> 4 != 4:
                    continue  # IPv4 only
                j = pkt[19] - 1  # 10.213.0.(j+1)
                if not 0 <= j < len(fds) or j == i:
                    continue
                now = time.monotonic()
                up_free[i] = max(now, up_free[i]) + len(pkt) / rate
                at_switch = up_free[i] + delay
                down_free[j] = max(at_switch, down_free[j]) + len(pkt) / rate
                heapq.heappush(due, (down_free[j] + delay, next(order), fds[j], pkt))
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, _, fd, pkt = heapq.heappop(due)
            try:
                os.write(fd, pkt)
            except BlockingIOError:  # the host's receive queue is full: drop, as a link would
                pass


if __name__ == "__main__":
    main()
