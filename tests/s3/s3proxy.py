"""s3proxy.py — a small fault-injecting HTTP proxy for the S3 tests: it
forwards each request to the S3 server on 127.0.0.1:UPSTREAM unchanged (the
Host header too, so SigV4 signatures still verify), except that of every
`every` requests the first `burst` get `503 SlowDown` (S3's own "reduce your
request rate") without reaching the server.  Listens on 127.0.0.1, a free port.

    with FaultProxy(s3.port, every=5, burst=2) as px:
        ... endpoint px.endpoint ...; px.injected 503s sent

gate (optional): called as gate(method, path, headers) before a request is
forwarded; if it returns true, the connection is closed without a reply (a
server gone: the client sees an empty reply or a reset).
"""
import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
            b'<Message>Please reduce your request rate.</Message></Error>')


class FaultProxy:
    def __init__(self, upstream_port, every=5, burst=2, gate=None):
        self.upstream = upstream_port
        self.gate = gate
        self.every, self.burst = every, burst
        self.count = self.injected = 0
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def handle_any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                if proxy.gate and proxy.gate(self.command, self.path, self.headers):
                    self.close_connection = True
                    return
                with proxy.lock:
                    k = proxy.count
                    proxy.count += 1
                    fault = k % proxy.every < proxy.burst
                    proxy.injected += fault
                if fault:
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(SLOWDOWN)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(SLOWDOWN)
                    return
                up = http.client.HTTPConnection("127.0.0.1", proxy.upstream, timeout=60)
                headers = {k: v for k, v in self.headers.items()}
                up.request(self.command, self.path, body=body if n else None, headers=headers)
                r = up.getresponse()
                data = r.read()
                self.send_response(r.status, r.reason)
                for k, v in r.getheaders():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data) if self.command != "HEAD" else r.getheader("Content-Length") or 0))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                up.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *a):
        self.server.shutdown()
        self.server.server_close()
