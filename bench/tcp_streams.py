#!/usr/bin/env python3
"""TCP throughput between emulated nodes (bench/cluster_scaling.sh).

  tcp_streams.py serve PORT            accept one stream, print its MB/s
  tcp_streams.py send HOST PORT SECS   send to HOST:PORT for SECS seconds

The receiver prints "MB/s <rate>" (megabytes, 1e6, of payload per second)
once the sender closes. A ring of these, node k sending to node k+1, all at
once, measures what the links and the machine forwarding them carry together.
"""
import socket
import sys
import time


def serve(port):
    with socket.create_server(("0.0.0.0", port)) as server:
        conn, _ = server.accept()
        with conn:
            received, start = 0, time.monotonic()
            while chunk := conn.recv(1 << 20):
                received += len(chunk)
            print(f"MB/s {received / (time.monotonic() - start) / 1e6:.1f}")


def send(host, port, seconds):
    block = bytes(1 << 20)
    for _ in range(50):  # the receiver may still be starting
        try:
            conn = socket.create_connection((host, port))
            break
        except ConnectionRefusedError:
            time.sleep(0.1)
    else:
        sys.exit(f"tcp_streams.py: cannot connect to {host}:{port}")
    with conn:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            conn.sendall(block)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    elif len(sys.argv) == 5 and sys.argv[1] == "send":
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        sys.exit(__doc__)
