#!/usr/bin/env python3
"""Regenerates the committed gRPC stubs from the repository's `proto/` with grpcio-tools, or checks them.

    python scripts/gen_proto.py           # write src/cairn/_proto/cairn/v1/worker_pb2{,_grpc}.py{,i}
    python scripts/gen_proto.py --check   # regenerate into a temporary directory and diff; exit 1 on any difference

The stubs are generated with `-I <repo>/proto`, so the descriptor keeps its canonical name
`cairn/v1/worker.proto`; the one absolute import grpcio-tools writes (`from cairn.v1 import worker_pb2`), which
would resolve against this SDK's own `cairn` package, is rewritten as a relative import. Use the grpcio-tools
version pinned in `pyproject.toml` (the `test` extra): another version writes different code.
"""

from __future__ import annotations

import argparse
import difflib
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SDK = HERE.parent
REPO = SDK.parent.parent
PROTO_ROOT = REPO / "proto"
PROTO = "cairn/v1/worker.proto"
TARGET = SDK / "src" / "cairn" / "_proto"
FILES = ("worker_pb2.py", "worker_pb2.pyi", "worker_pb2_grpc.py")
PINNED = "1.66.2"


def generate(out: Path) -> None:
    """Runs protoc (grpcio-tools) into `out` and fixes the imports."""
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError:
        sys.exit("grpcio-tools is not installed: pip install 'cairn-sdk[test]' (or grpcio-tools==%s)" % PINNED)
    from importlib.metadata import version

    found = version("grpcio-tools")
    if found != PINNED:
        sys.exit(f"grpcio-tools {found} is installed, but the stubs are generated with {PINNED}: "
                 f"pip install grpcio-tools=={PINNED}")
    include = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        PROTO,
    ]
    if protoc.main(args) != 0:
        sys.exit("protoc failed")
    grpc_file = out / "cairn" / "v1" / "worker_pb2_grpc.py"
    text = grpc_file.read_text()
    absolute = "from cairn.v1 import worker_pb2 as cairn_dot_v1_dot_worker__pb2"
    if absolute not in text:
        sys.exit(f"unexpected grpcio-tools output: `{absolute}` not found in {grpc_file.name}")
    grpc_file.write_text(text.replace(absolute, "from . import worker_pb2 as cairn_dot_v1_dot_worker__pb2"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="diff against the committed stubs instead of writing")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        generate(out)
        generated = out / "cairn" / "v1"
        committed = TARGET / "cairn" / "v1"
        if not opts.check:
            committed.mkdir(parents=True, exist_ok=True)
            for name in FILES:
                shutil.copyfile(generated / name, committed / name)
            print(f"wrote {', '.join(FILES)} to {committed.relative_to(SDK)}")
            return 0
        differ = False
        for name in FILES:
            new = (generated / name).read_text().splitlines(keepends=True)
            path = committed / name
            old = path.read_text().splitlines(keepends=True) if path.exists() else []
            diff = list(difflib.unified_diff(old, new, f"committed/{name}", f"regenerated/{name}"))
            if diff:
                differ = True
                sys.stdout.writelines(diff)
        if differ:
            print(f"\nthe committed stubs differ from {PROTO}: run `python scripts/gen_proto.py` and commit",
                  file=sys.stderr)
            return 1
        print(f"the committed stubs match {PROTO}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
