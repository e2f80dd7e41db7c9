#!/usr/bin/env python3
"""The mixed workload of the passthrough bench's OFFLOAD section (benches/passthrough/offload.rs).

Many HTTP/1.1 downloads, each on its own connection: plain on port 80, or HTTPS on 443 (a
real TLS handshake, then the response in encrypted records). Python's ssl module is
OpenSSL, so the TLS is what OpenSSL clients and servers speak; no crate needed.

  flows.py serve CERT KEY        listens on 80 and 443, prints "ready", serves until killed
  flows.py client HOST SCHEDULE RATE SECS SEED
      SCHEDULE: one flow per line, "SIZE TLS" (response body bytes, 0 or 1). Flows start
      at Poisson arrivals of RATE per second for SECS seconds, taking the schedule's lines
      in turn; then the client waits (at most 30 s) for those still running and prints one
      JSON line: flows started and completed, errors, response bytes, the largest lag of
      a start behind its arrival time.
"""

import json
import os
import random
import socket
import ssl
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

BODY = os.urandom(1 << 20)  # incompressible; the bodies are slices of it, repeated
CHUNK = 256 * 1024


def serve_one(conn, ctx):
    try:
        conn.settimeout(30)
        if ctx is not None:
            conn = ctx.wrap_socket(conn, server_side=True)
        req = b""
        while b"\r\n\r\n" not in req and len(req) < 8192:
            got = conn.recv(4096)
            if not got:
                return
            req += got
        path = req.split(b" ", 2)[1]
        size = int(path.lstrip(b"/"))
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % size
        )
        body = memoryview(BODY)
        left = size
        while left > 0:
            n = min(left, len(body))
            conn.sendall(body[:n])
            left -= n
        # The client closes first (it has read the whole body): no TIME_WAIT here.
        while conn.recv(4096):
            pass
    except (OSError, ValueError, IndexError):
        pass
    finally:
        conn.close()


def accept_loop(port, ctx):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port))
    ls.listen(1024)
    while True:
        conn, _ = ls.accept()
        threading.Thread(target=serve_one, args=(conn, ctx), daemon=True).start()


def serve(cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    for port, c in ((80, None), (443, ctx)):
        threading.Thread(target=accept_loop, args=(port, c), daemon=True).start()
    time.sleep(0.2)
    print("ready", flush=True)
    threading.Event().wait()


def fetch(host, size, tls, ctx):
    s = socket.create_connection((host, 443 if tls else 80), timeout=30)
    try:
        if tls:
            s = ctx.wrap_socket(s)
        s.sendall(
            b"GET /%d HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: relayd-bench\r\n"
            b"Accept: */*\r\n\r\n" % size
        )
        head = b""
        while b"\r\n\r\n" not in head:
            got = s.recv(16384)
            if not got:
                raise OSError("closed in the headers")
            head += got
        got_body = len(head) - head.index(b"\r\n\r\n") - 4
        buf = bytearray(CHUNK)
        while got_body < size:
            n = s.recv_into(buf)
            if n == 0:
                raise OSError("closed in the body")
            got_body += n
        return got_body
    finally:
        s.close()


def client(host, schedule, rate, secs, seed):
    flows = []
    with open(schedule) as f:
        for line in f:
            size, tls = line.split()
            flows.append((int(size), tls == "1"))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    rng = random.Random(seed)
    stats = {"flows": 0, "done": 0, "errors": 0, "bytes": 0, "tls_flows": 0, "tls_bytes": 0}
    lock = threading.Lock()

    def run(size, tls):
        try:
            n = fetch(host, size, tls, ctx)
            with lock:
                stats["done"] += 1
                stats["bytes"] += n
                if tls:
                    stats["tls_bytes"] += n
        except (OSError, ssl.SSLError):
            with lock:
                stats["errors"] += 1

    lag = 0.0
    futures = []
    with ThreadPoolExecutor(max_workers=256) as pool:
        t0 = time.monotonic()
        at = 0.0
        i = 0
        while True:
            at += rng.expovariate(rate)
            if at > secs:
                break
            now = time.monotonic() - t0
            if at > now:
                time.sleep(at - now)
            else:
                lag = max(lag, now - at)
            size, tls = flows[i % len(flows)]
            i += 1
            stats["flows"] += 1
            stats["tls_flows"] += tls
            futures.append(pool.submit(run, size, tls))
        wait(futures, timeout=30)
        stats["lag_s"] = round(lag, 3)
        stats["elapsed_s"] = round(time.monotonic() - t0, 3)
        print(json.dumps(stats), flush=True)
        os._exit(0)  # do not wait for flows still stuck after the timeout


def main():
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["client"]:
        host, schedule, rate, secs, seed = sys.argv[2:7]
        client(host, schedule, float(rate), float(secs), int(seed))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
