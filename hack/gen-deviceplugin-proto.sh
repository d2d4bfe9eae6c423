#!/usr/bin/env bash
# Regenerate the Python message module of the kubelet device plugin API from
# simulator/deviceplugin/v1beta1.proto: v1beta1_pb2.py (the messages) and v1beta1_pb2.pyi (their
# types, for mypy). Both are committed, so installing Ultraplane needs no protoc.
#
# The gRPC service glue is hand-written and typed (simulator/deviceplugin/services.py), so no
# _pb2_grpc.py is generated: that module would pin the grpcio version it was generated with.
# The generated module requires a protobuf runtime at least as new as the protoc that wrote
# it: keep the `protobuf>=` bound in pyproject.toml at or below that version (the first
# line of v1beta1_pb2.py names it).
#
# Usage: hack/gen-deviceplugin-proto.sh   (needs grpcio-tools: pip install -e '.[dev]')
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$ROOT/simulator/deviceplugin"
PYTHON="${PYTHON:-python3}"

if ! "$PYTHON" -c 'import grpc_tools.protoc' 2>/dev/null; then
    echo "hack/gen-deviceplugin-proto.sh: grpcio-tools is not installed for $PYTHON; run pip install -e '.[dev]'." >&2
    exit 1
fi
"$PYTHON" -m grpc_tools.protoc -I "$DIR" --python_out="$DIR" --pyi_out="$DIR" "$DIR/v1beta1.proto"
echo "wrote $DIR/v1beta1_pb2.py and $DIR/v1beta1_pb2.pyi"
