"""Generated gRPC stubs of the Cairn worker protocol (`proto/cairn/v1/worker.proto`); see scripts/gen_proto.py."""
