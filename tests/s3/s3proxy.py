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

lie (optional): a server that lies.  Called as lie(req) for each request
(a Req: method, path, headers, n = its number from 0); None forwards it as
above; else a function act(h) that answers it itself, with h.forward() (the
server's answer to the same request: its headers are signed, so the proxy
cannot change them) and h.send(...) (any status, headers and body,
with a Content-Length that need not be the body's, sent at once or a few
bytes at a time, the connection closed after it or not).  The lies the
tests use are built by the functions below (whole_object, shifted_range,
short_body, ...).  px.lies counts the requests answered so.
"""
import http.client
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
            b'<Message>Please reduce your request rate.</Message></Error>')


class Req:
    def __init__(self, method, path, headers, n):
        self.method, self.path, self.headers, self.n = method, path, headers, n

    def range(self):
        """(first, last) of its Range header, or None."""
        m = re.match(r"bytes=(\d+)-(\d+)$", self.headers.get("Range") or "")
        return (int(m.group(1)), int(m.group(2))) if m else None

    def is_list(self):
        return self.method == "GET" and "list-type=2" in self.path


class FaultProxy:
    def __init__(self, upstream_port, every=5, burst=2, gate=None, lie=None):
        self.upstream = upstream_port
        self.gate = gate
        self.lie = lie
        self.every, self.burst = every, burst
        self.count = self.injected = self.lies = 0
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def forward(self):
                """The server's (status, reason, [(header, value)], body) for this request."""
                up = http.client.HTTPConnection("127.0.0.1", proxy.upstream, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items()}
                    up.request(self.command, self.path, body=self.body or None, headers=headers)
                    r = up.getresponse()
                    return r.status, r.reason, r.getheaders(), r.read()
                finally:
                    up.close()

            def send(self, status, headers, body=b"", length=None, close=False, rate=None, chunk=1):
                """Answer status with headers (Content-Length: length, else
                len(body)) and body, all at once or `chunk` bytes every
                1/rate s; close the connection after it if close."""
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                if length is None and self.command == "HEAD":  # the object's, not the (empty) body's
                    length = dict((k.lower(), v) for k, v in headers).get("content-length", 0)
                self.send_header("Content-Length", str(len(body) if length is None else length))
                if close:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                if self.command == "HEAD":
                    return
                if rate is None:
                    self.wfile.write(body)
                    return
                for i in range(0, len(body), chunk):
                    self.wfile.write(body[i:i + chunk])
                    self.wfile.flush()
                    time.sleep(1.0 / rate)

            def handle_any(self):
                n = int(self.headers.get("Content-Length") or 0)
                self.body = self.rfile.read(n) if n else b""
                if proxy.gate and proxy.gate(self.command, self.path, self.headers):
                    self.close_connection = True
                    return
                with proxy.lock:
                    k = proxy.count
                    proxy.count += 1
                    fault = k % proxy.every < proxy.burst
                    proxy.injected += fault
                act = proxy.lie(Req(self.command, self.path, self.headers, k)) if proxy.lie and not fault else None
                if act:
                    with proxy.lock:
                        proxy.lies += 1
                    try:
                        act(self)
                    except OSError:  # the client went away (it gave up): fine
                        self.close_connection = True
                    return
                if fault:
                    self.send(503, [("Content-Type", "application/xml")], SLOWDOWN)
                    return
                status, reason, headers, data = self.forward()
                self.send_response(status, reason)
                for k, v in headers:
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data) if self.command != "HEAD" else
                                                       dict((a.lower(), b) for a, b in headers).get("content-length", 0)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

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


# ---- lies: each a function act(h) for FaultProxy's lie -----------------------

def _hdrs(headers, drop=()):
    drop = {d.lower() for d in drop}
    return [(k, v) for k, v in headers if k.lower() not in drop]


def whole_object(obj, status=200):
    """A Range GET answered with the whole object (obj(h): its bytes; the
    proxy cannot ask the server for them: the Range header is signed), as
    a 200, or (206) as a 206 whose Content-Range is the range asked for."""
    def act(h):
        a, b = Req(h.command, h.path, h.headers, 0).range()
        st, _, hd, _ = h.forward()
        body = obj(h)
        hd = _hdrs(hd, ("content-range",))
        if status == 206:
            hd.append(("Content-Range", f"bytes {a}-{b}/{len(body)}"))
        h.send(status if st // 100 == 2 else st, hd, body)
    return act


def shifted_range(obj, by=4096):
    """A Range GET answered with the bytes `by` further on (obj(h): the
    object's bytes), and a Content-Range that says so."""
    def act(h):
        a, b = Req(h.command, h.path, h.headers, 0).range()
        st, _, hd, _ = h.forward()
        body = obj(h)
        a2, b2 = a + by, min(b + by, len(body) - 1)
        h.send(st, _hdrs(hd, ("content-range",)) + [("Content-Range", f"bytes {a2}-{b2}/{len(body)}")],
               body[a2:b2 + 1])
    return act


def wrong_total(by):
    """The server's answer to a Range GET with the object's size in its
    Content-Range changed by `by` bytes (None: "*", no size at all)."""
    def act(h):
        st, _, hd, body = h.forward()
        cr = dict((k.lower(), v) for k, v in hd).get("content-range", "")
        head, _, total = cr.rpartition("/")
        new = f"{head}/{'*' if by is None else int(total) + by}" if head else cr
        h.send(st, _hdrs(hd, ("content-range",)) + ([("Content-Range", new)] if new else []), body)
    return act


def short_body(keep=0.5):
    """The right headers (Content-Length of the whole range), a part of the
    body, then the connection closed."""
    def act(h):
        st, _, hd, body = h.forward()
        h.send(st, hd, body[:int(len(body) * keep)], length=len(body), close=True)
    return act


def long_body(extra=65536, declared=True):
    """The range and `extra` bytes more (Content-Length saying so when declared)."""
    def act(h):
        st, _, hd, body = h.forward()
        more = body + b"\x5a" * extra
        h.send(st, hd, more, length=len(more) if declared else len(body), close=not declared)
    return act


def flipped(at=0.5):
    """The right headers and length, one byte of the body changed."""
    def act(h):
        st, _, hd, body = h.forward()
        if body:
            i = int(len(body) * at)
            body = body[:i] + bytes([body[i] ^ 0x55]) + body[i + 1:]
        h.send(st, hd, body)
    return act


def other_etag(etag='"0123456789abcdef0123456789abcdef"'):
    """The server's answer with another ETag (a HEAD of a replaced object)."""
    def act(h):
        st, _, hd, body = h.forward()
        h.send(st, _hdrs(hd, ("etag",)) + [("ETag", etag)], body)
    return act


def status(code, body=b"", headers=()):
    """A bare status (304, 412, a redirect ...) with headers and body."""
    def act(h):
        h.send(code, list(headers) + ([("Content-Type", "application/xml")] if body else []), body)
    return act


def redirect(code, location):
    return status(code, headers=[("Location", location)])


def xml(body, code=200):
    return status(code, body=body)


def trickle(rate=4, chunk=1):
    """The right headers, then the body `chunk` bytes every 1/rate s."""
    def act(h):
        st, _, hd, body = h.forward()
        h.send(st, hd, body, rate=rate, chunk=chunk)
    return act


def huge_headers(n=2000, size=1000):
    """The server's answer after n headers of size bytes each."""
    def act(h):
        st, _, hd, body = h.forward()
        h.send(st, hd + [(f"X-Pad-{i}", "p" * size) for i in range(n)], body)
    return act


def huge_length(length=1 << 40, close=True):
    """The right status and headers but Content-Length `length`, the real
    body, then the connection closed (or kept open, silent, when not close)."""
    def act(h):
        st, _, hd, body = h.forward()
        h.send(st, hd, body, length=length, close=close)
        if not close:
            time.sleep(60)
    return act
