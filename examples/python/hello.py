"""Hello world: a Cairn worker serving one typed action. Run `cairn dev`, then `python hello.py`."""
import os
import cairn
from pydantic import BaseModel

class Hello(BaseModel):
    name: str

worker = cairn.Worker(os.environ.get("CAIRN_WORKER_URL", "http://127.0.0.1:7401"), token=os.environ.get("CAIRN_WORKER_TOKEN"))

@worker.action("hello.greet", effect="read")
def greet(args: Hello, ctx: cairn.Context) -> dict:
    return {"greeting": f"Hello, {args.name}!"}

worker.run()
