"""Submits refund_plan.json for an order and prints what happened.

    python run_refund.py [ORDER_ID]     # default A-1001 (damaged: refunded); A-1002 is not refundable

CAIRN_SERVER (default http://127.0.0.1:7400, `cairn dev`'s API), CAIRN_API_TOKEN (none under `cairn dev`).
Exit code 0 when the run succeeded, 1 otherwise.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import cairn

PLAN = Path(__file__).with_name("refund_plan.json")


def main() -> int:
    order_id = sys.argv[1] if len(sys.argv) > 1 else "A-1001"
    with cairn.Client(os.environ.get("CAIRN_SERVER", "http://127.0.0.1:7400"),
                      token=os.environ.get("CAIRN_API_TOKEN")) as client:
        try:
            run = client.run(PLAN, input={"order_id": order_id}, timeout=60)
        except cairn.InvalidPlan as e:
            print(e, file=sys.stderr)
            print("is support_worker.py running? its actions must be registered first", file=sys.stderr)
            return 1
        except TimeoutError as e:
            print(e, file=sys.stderr)
            print("is support_worker.py still running? `cairn show RUN_ID` says what the run waits for",
                  file=sys.stderr)
            return 1
    print(f"run {run.id}: {run.status}")
    for step in run.steps:
        detail = step.output if step.status == "succeeded" else (step.error or "")
        print(f"  {step.id:<8} {step.status:<10} {detail}")
    return 0 if run.status == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
