"""moto's server with one request at a time: a lock in front of its app.

moto 5.2.5's threaded server does not isolate TransactWriteItems: it copies
each table a transaction touches and, on a failed condition, swaps the whole
tables back, wiping writes other requests made meanwhile. The tests (state,
windows, Java KCL 3.x) need a DynamoDB whose answers are its own, not a race's,
so every request is handled alone; connections are still accepted by threads.

Usage (scripts/servers.sh): python moto_serial.py HOST PORT
"""
import sys
import threading

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


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(host, port, Serialized(app), threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
