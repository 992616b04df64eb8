"""A Paimon table on local disk served as an S3 bucket on 127.0.0.1 (path style, signatures not
checked), which holds every read of a data file unanswered until released: a call that opens the
table (its snapshot, schema and manifests are answered) and then reads its rows waits meanwhile,
with whatever it holds — how a test keeps streamhouse's reader connections busy.

    with HeldDataFiles(root, bucket="lake") as ep: ...   # ep.port, ep.held (data-file reads held);
                                                          # ep.release(): held reads get 500, later ones too

Only what paimon-rust's S3 storage asks for is answered: HEAD and GET (ranges too) of an object,
and ListObjectsV2 with a prefix and `/` delimiter. A data file is an object under `bucket-<n>/`.
"""

from __future__ import annotations

import os
import threading
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape


class _Server(ThreadingHTTPServer):
    # Every reader opens its own connections at once: a backlog beyond socketserver's 5.
    request_queue_size = 64
    daemon_threads = True


class HeldDataFiles:
    def __init__(self, root: str, bucket: str = "lake"):
        self.root, self.bucket = os.path.abspath(root), bucket
        self.held = 0
        self.lock = threading.Lock()
        self.released = threading.Event()
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def __enter__(self) -> HeldDataFiles:
        return self

    def __exit__(self, *exc) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()

    def release(self) -> None:
        self.released.set()

    def _handler(self):
        ep = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request per connection: no reuse of a held one

            def log_message(self, *args) -> None:
                pass

            def _send(self, code: int, body: bytes = b"", headers: dict | None = None) -> None:
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _key(self) -> tuple[str, dict]:
                parts = urlsplit(self.path)
                path = unquote(parts.path).lstrip("/")
                bucket, _, key = path.partition("/")
                assert bucket == ep.bucket, path
                return key, parse_qs(parts.query, keep_blank_values=True)

            def _list(self, query: dict) -> None:
                prefix = query.get("prefix", [""])[0]
                delimiter = query.get("delimiter", [""])[0]
                keys, prefixes = [], set()
                for dirpath, _, files in os.walk(ep.root):
                    for f in files:
                        key = os.path.relpath(os.path.join(dirpath, f), ep.root)
                        if not key.startswith(prefix):
                            continue
                        rest = key[len(prefix) :]
                        if delimiter and delimiter in rest:
                            prefixes.add(prefix + rest.split(delimiter, 1)[0] + delimiter)
                        else:
                            keys.append(key)
                contents = "".join(
                    f"<Contents><Key>{escape(k)}</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>"
                    f'<ETag>"{os.path.getsize(os.path.join(ep.root, k))}"</ETag>'
                    f"<Size>{os.path.getsize(os.path.join(ep.root, k))}</Size><StorageClass>STANDARD</StorageClass>"
                    "</Contents>"
                    for k in sorted(keys)
                )
                common = "".join(
                    f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>" for p in sorted(prefixes)
                )
                body = (
                    '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                    f"<Name>{ep.bucket}</Name><Prefix>{escape(prefix)}</Prefix>"
                    f"<KeyCount>{len(keys) + len(prefixes)}</KeyCount>"
                    f"<MaxKeys>1000</MaxKeys><Delimiter>{escape(delimiter)}</Delimiter><IsTruncated>false</IsTruncated>"
                    f"{contents}{common}</ListBucketResult>"
                ).encode()
                self._send(200, body, {"Content-Type": "application/xml"})

            def _object(self) -> None:
                key, query = self._key()
                if "list-type" in query:
                    return self._list(query)
                local = os.path.join(ep.root, key)
                if key.endswith("/") or os.path.isdir(local):
                    return self._send(200 if os.path.isdir(local) else 404)
                if not os.path.isfile(local):
                    return self._send(
                        404, b"<Error><Code>NoSuchKey</Code></Error>", {"Content-Type": "application/xml"}
                    )
                if self.command == "GET" and "/bucket-" in "/" + key:
                    with ep.lock:
                        ep.held += 1
                    ep.released.wait()
                    return self._send(500, b"held data file endpoint: released")
                with open(local, "rb") as f:
                    data = f.read()
                headers = {"ETag": f'"{len(data)}"', "Last-Modified": formatdate(usegmt=True)}
                rng = self.headers.get("Range")
                if rng and self.command == "GET":
                    first, _, last = rng.removeprefix("bytes=").partition("-")
                    start = int(first) if first else len(data) - int(last)
                    end = min(int(last), len(data) - 1) if first and last else len(data) - 1
                    headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                    return self._send(206, data[start : end + 1], headers)
                if self.command == "HEAD":
                    self.send_response(200)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    return None
                return self._send(200, data, headers)

            do_GET = do_HEAD = _object

        return Handler
