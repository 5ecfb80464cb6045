#!/usr/bin/env python3
"""The webhooks of the lambda examples, with Python's standard library only.

POST /sync      the CompositeController `hello`: one ConfigMap per Hello, and a status
POST /decorate  the DecoratorController `hello-labels`: a label and an attached ConfigMap

`bosun run --sandbox` starts it on a free loopback port (it prints the port on its first
line) and stops it with itself. Run it alone with `python3 hooks.py [PORT]`.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def sync(request):
    parent = request["parent"]
    name = parent["metadata"]["name"]
    greeting = parent.get("spec", {}).get("greeting", "hello")
    children = request.get("children", {}).get("ConfigMap.v1", {})
    return {
        "status": {"greeting": f"{greeting}, {name}!", "children": len(children)},
        "children": [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{name}-greeting"},
                "data": {"greeting": f"{greeting}, {name}!"},
            }
        ],
    }


def decorate(request):
    name = request["object"]["metadata"]["name"]
    return {
        "labels": {"examples.bosun.dev/decorated": "true"},
        "attachments": [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{name}-note"},
                "data": {"note": "attached by the DecoratorController hello-labels"},
            }
        ],
    }


HOOKS = {"/sync": sync, "/decorate": decorate}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        hook = HOOKS.get(self.path)
        if hook is None:
            self.send_error(404, f"no hook at {self.path}")
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            answer = json.dumps(hook(json.loads(self.rfile.read(length)))).encode()
        except (KeyError, ValueError) as e:
            self.send_error(400, f"bad request: {e}")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format, *args):
        pass


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
