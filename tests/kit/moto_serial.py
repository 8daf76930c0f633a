"""moto's server with one request at a time: a lock in front of its app.

moto 5.2.5's threaded server does not isolate TransactWriteItems: it copies
each table a transaction touches and, on a failed condition, swaps the whole
tables back, wiping writes other requests made meanwhile. The tests (state,
windows, Java KCL 3.x) need a DynamoDB whose answers are its own, not a race's,
so every request is handled alone; connections are still accepted by threads.

moto 5.2.5 answers CloudWatch in its JSON and query protocols, not in the Smithy
RPC v2 CBOR that the Rust SDK sends: `CborAsJson` turns such a request into the
same operation in JSON, and moto's answer back into CBOR.

Usage (scripts/servers.sh): python moto_serial.py HOST PORT
"""
import io
import json
import re
import sys
import threading

import cbor2

from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app


class Serialized:
    """A WSGI app that runs `app` for one request at a time, answer included."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        with self.lock:
            # The body is built inside the lock too: moto may produce it lazily.
            return list(self.app(environ, start_response))


class CborAsJson:
    """A WSGI app that hands `app` Smithy RPC v2 CBOR requests as awsJson1_0."""

    OPERATION = re.compile(r"^/service/([^/]+)/operation/([^/]+)$")

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        operation = self.OPERATION.match(environ.get("PATH_INFO", ""))
        if not operation or environ.get("HTTP_SMITHY_PROTOCOL") != "rpc-v2-cbor":
            return self.app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        request = cbor2.loads(environ["wsgi.input"].read(length)) if length else {}
        body = json.dumps(request, default=lambda value: value.timestamp()).encode()
        environ = dict(environ, PATH_INFO="/", CONTENT_LENGTH=str(len(body)), CONTENT_TYPE="application/x-amz-json-1.0")
        environ["HTTP_X_AMZ_TARGET"] = f"{operation.group(1)}.{operation.group(2)}"
        environ["wsgi.input"] = io.BytesIO(body)
        answer = {}

        def keep(status, headers, exc_info=None):
            answer["status"], answer["headers"] = status, headers

        text = b"".join(self.app(environ, keep))
        reply = cbor2.dumps(json.loads(text) if text.strip() else {})
        headers = [(k, v) for k, v in answer["headers"] if k.lower() not in ("content-type", "content-length")]
        headers += [("Content-Type", "application/cbor"), ("Content-Length", str(len(reply))), ("smithy-protocol", "rpc-v2-cbor")]
        start_response(answer["status"], headers)
        return [reply]


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(host, port, Serialized(CborAsJson(app)), threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
