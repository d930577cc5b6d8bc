"""A real S3-API server for the tests of `scion push` and `scion pull` (moto_server, from
PyPI, which scripts/setup installs), and a proxy between scion and it that injects faults:
delays, dropped connections, 500s, flipped bytes and truncated bodies."""

import http.client
import http.server
import os
import shutil
import signal
import socketserver
import subprocess
import threading
import time
import urllib.request

from scion_helpers import free_port


class Moto:
    """moto_server on 127.0.0.1, its own process group; `stop` ends it."""

    def __init__(self, root):
        exe = shutil.which("moto_server")
        if not exe:
            raise RuntimeError("moto_server is not installed: run scripts/setup")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(root, "moto.log"), "wb")
        self.proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(self.port)], stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=1).read()
                break
            except Exception:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"moto_server did not start (log: {self.log.name})")
                time.sleep(0.1)

    def bucket(self, name):
        req = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        urllib.request.urlopen(req, timeout=10).read()
        return name

    def keys(self, bucket, prefix=""):
        """Every key in `bucket` below `prefix`, with its size (ListObjectsV2, one page)."""
        import xml.etree.ElementTree as ET
        url = f"{self.endpoint}/{bucket}?list-type=2&max-keys=100000&prefix={prefix}"
        root = ET.fromstring(urllib.request.urlopen(url, timeout=10).read())
        ns = root.tag.split("}")[0] + "}" if root.tag.startswith("{") else ""
        return {c.find(ns + "Key").text: int(c.find(ns + "Size").text) for c in root.iter(ns + "Contents")}

    def delete(self, bucket, key):
        req = urllib.request.Request(f"{self.endpoint}/{bucket}/{key}", method="DELETE")
        urllib.request.urlopen(req, timeout=10).read()

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        self.log.close()


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _forward(self):
        proxy = self.server.proxy
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        mode = proxy.mode_for(self.command, self.path)
        proxy.requests.append((self.command, self.path, mode))
        if mode.startswith("delay:"):
            time.sleep(float(mode[6:]))
        if mode == "drop":
            self.close_connection = True
            self.connection.close()
            return
        if mode == "500":
            err = b"<?xml version='1.0'?><Error><Code>InternalError</Code><Message>injected</Message></Error>"
            self.send_response(500)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(err)))
            self.end_headers()
            self.wfile.write(err)
            return
        up = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
        up.request(self.command, self.path, body=body, headers=headers)
        resp = up.getresponse()
        data = resp.read()
        up.close()
        if mode == "flip" and data and resp.status in (200, 206):
            b = bytearray(data)
            b[len(b) // 2] ^= 0x20
            data = bytes(b)
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if mode == "truncate" and len(data) > 1:
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(data)

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _forward


class FaultProxy:
    """An HTTP proxy to moto on a port of its own. `mode` applies to reads of packs (ranged
    GETs of `packs/HASH`) unless `everything`; `puts_left` (an int) drops every PUT once that
    many went through."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.mode = "pass"
        self.everything = False
        self.puts_left = None
        self.requests = []
        self.lock = threading.Lock()
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.server = _Server(("127.0.0.1", self.port), _Handler)
        self.server.proxy = self
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def mode_for(self, command, path):
        with self.lock:
            if command == "PUT" and self.puts_left is not None:
                if self.puts_left <= 0:
                    return "drop"
                self.puts_left -= 1
            is_pack_read = command == "GET" and "/packs/" in path and ".idx" not in path
            return self.mode if (self.everything or is_pack_read) else "pass"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
