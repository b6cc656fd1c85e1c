"""A tiny stand-in for a shop's internal API, so the example runs offline. Not part of Cairn.

    python shop_service.py [--port 8765]

GET  /orders/{id}   the order, or 404
POST /refunds       {"order_id", "amount_cents", "reason"} with an `Idempotency-Key` header: creates a refund once
                    per key; repeating the key returns the same refund (HTTP 200 instead of 201)
GET  /refunds       every refund made, with the key it was made under
"""

from __future__ import annotations

import argparse
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ORDERS = {
    "A-1001": {"id": "A-1001", "customer": "ada@example.com", "total_cents": 4599, "status": "delivered",
               "damaged": True},
    "A-1002": {"id": "A-1002", "customer": "grace@example.com", "total_cents": 1250, "status": "delivered",
               "damaged": False},
}
REFUNDS: dict[str, dict] = {}  # by idempotency key
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def _send(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.startswith("/orders/"):
            order = ORDERS.get(self.path.removeprefix("/orders/"))
            self._send(200, order) if order else self._send(404, {"error": "no such order"})
        elif self.path == "/refunds":
            with LOCK:
                self._send(200, [{"idempotency_key": k, **v} for k, v in REFUNDS.items()])
        else:
            self._send(404, {"error": "no such route"})

    def do_POST(self) -> None:  # noqa: N802
        if self.path != "/refunds":
            return self._send(404, {"error": "no such route"})
        key = self.headers.get("Idempotency-Key")
        if not key:
            return self._send(400, {"error": "an Idempotency-Key header is required"})
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if body.get("order_id") not in ORDERS:
            return self._send(404, {"error": "no such order"})
        with LOCK:
            if key in REFUNDS:
                return self._send(200, REFUNDS[key])
            REFUNDS[key] = {"refund_id": f"re_{uuid.uuid4().hex[:12]}", "order_id": body["order_id"],
                            "amount_cents": body["amount_cents"], "reason": body.get("reason", "")}
            self._send(201, REFUNDS[key])

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        print(f"[shop] {self.command} {self.path} -> {args[1] if len(args) > 1 else ''}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    port = parser.parse_args().port
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"[shop] listening on http://127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
