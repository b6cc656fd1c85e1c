"""An agent's tools as a Cairn worker: look an order up (read), refund it (non-idempotent).

    python support_worker.py

CAIRN_WORKER_URL (default http://127.0.0.1:7401, `cairn dev`'s worker port), CAIRN_WORKER_TOKEN (none under
`cairn dev`), SHOP_URL (default http://127.0.0.1:8765, see shop_service.py).
"""

from __future__ import annotations

import os

import httpx
from pydantic import BaseModel, Field

import cairn

SHOP_URL = os.environ.get("SHOP_URL", "http://127.0.0.1:8765")

worker = cairn.Worker(os.environ.get("CAIRN_WORKER_URL", "http://127.0.0.1:7401"),
                      token=os.environ.get("CAIRN_WORKER_TOKEN"), concurrency=4)


class OrderQuery(BaseModel):
    order_id: str = Field(pattern=r"^[A-Z]-\d{4}$", description="the order number, e.g. A-1001")


class Order(BaseModel):
    id: str
    customer: str
    total_cents: int
    status: str
    refundable: bool


class RefundRequest(BaseModel):
    order_id: str
    amount_cents: int = Field(gt=0)
    reason: str


class Refund(BaseModel):
    refund_id: str
    order_id: str
    amount_cents: int
    repeated: bool


def call(method: str, path: str, **kwargs: object) -> httpx.Response:
    """One call to the shop; failures become the failure records Cairn needs to decide what happens next."""
    try:
        response = httpx.request(method, f"{SHOP_URL}{path}", timeout=10, **kwargs)  # type: ignore[arg-type]
    except httpx.ConnectError as e:
        # Nothing reached the shop: safe to retry even a refund.
        raise cairn.DidNotTakeEffect("shop_unreachable", f"cannot reach the shop at {SHOP_URL}: {e}") from e
    except httpx.TransportError as e:
        raise cairn.Retryable("shop_error", f"the call to the shop failed midway: {e}") from e
    if response.status_code == 404:
        raise cairn.Permanent("not_found", response.json().get("error", "not found"), details={"path": path})
    if response.status_code == 429:
        raise cairn.Retryable("rate_limited", "the shop is busy",
                              retry_after=float(response.headers.get("Retry-After", "5")))
    if response.status_code >= 400:
        raise cairn.Retryable("shop_error", f"the shop answered {response.status_code}: {response.text[:200]}")
    return response


@worker.action("shop.order_status", effect="read", grounded_args=["/order_id"])
def order_status(args: OrderQuery, ctx: cairn.Context) -> Order:
    """Looks an order up: customer, total, delivery status, and whether it qualifies for a refund."""
    order = call("GET", f"/orders/{args.order_id}").json()
    return Order(id=order["id"], customer=order["customer"], total_cents=order["total_cents"],
                 status=order["status"], refundable=order["status"] == "delivered" and order["damaged"])


@worker.action("shop.refund", effect="non_idempotent")
def refund(args: RefundRequest, ctx: cairn.Context) -> Refund:
    """Refunds an order. Money moves: Cairn never re-runs it blindly, and the step's idempotency key goes to the
    shop so that a retry an operator asks for cannot refund twice."""
    ctx.logger.info("refunding %s cents on %s", args.amount_cents, args.order_id)
    response = call("POST", "/refunds", json=args.model_dump(), headers={"Idempotency-Key": ctx.idempotency_key})
    made = response.json()
    return Refund(refund_id=made["refund_id"], order_id=made["order_id"], amount_cents=made["amount_cents"],
                  repeated=response.status_code == 200)


if __name__ == "__main__":
    worker.run()
