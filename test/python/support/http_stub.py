"""A stand-in object-storage endpoint on 127.0.0.1 that the tests control: it either answers every
request with HTTP 500 (an error the extension passes on, quoting the request's URL), or holds
every connection open without a word until released (a call that reads from it waits meanwhile).

    with HttpStub(mode="500") as stub: ...   # stub.port, stub.requests (request lines seen),
                                             # stub.headers (each request's headers, names in lower case)
    with HttpStub(mode="hold") as stub: ...  # stub.accepted; stub.release() answers 500 from then on
"""

from __future__ import annotations

import socket
import threading

BODY = b"stub endpoint: internal failure"


class HttpStub:
    def __init__(self, mode: str = "500"):
        assert mode in ("500", "hold"), mode
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.requests: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.accepted = 0
        self.held: list[socket.socket] = []
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
            with self.lock:
                self.accepted += 1
                if self.mode == "hold":
                    self.held.append(conn)
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

    def release(self) -> None:
        """Held connections are answered (500) and from now on every request is."""
        with self.lock:
            self.mode = "500"
            held, self.held = self.held, []
        for conn in held:
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def close(self) -> None:
        self.release()
        self.stop.set()
        self.thread.join()
        self.sock.close()
