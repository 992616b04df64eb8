"""A stand-in object-storage endpoint on 127.0.0.1 that answers every request with HTTP 500 (an
error the extension passes on, quoting the request's URL) and records what it was sent. (An
endpoint that answers a table's metadata and holds its data files: support/lake_endpoint.py.)

    with HttpStub(mode="500") as stub: ...   # stub.port, stub.requests (request lines seen),
                                             # stub.headers (each request's headers, names in lower case)
"""

from __future__ import annotations

import socket
import threading

BODY = b"stub endpoint: internal failure"


class HttpStub:
    def __init__(self, mode: str = "500"):
        assert mode == "500", mode
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.requests: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def __enter__(self) -> HttpStub:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
            with self.lock:
                self.requests.append(head[0])
                self.headers.append(
                    {name.strip().lower(): value.strip() for name, _, value in (h.partition(":") for h in head[1:])}
                )
            conn.sendall(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n"
                + f"Content-Length: {len(BODY)}\r\nConnection: close\r\n\r\n".encode()
                + BODY
            )
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()
