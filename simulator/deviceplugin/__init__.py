"""The kubelet's device plugin API (v1beta1) on the wire: its schema and typed gRPC glue.

`v1beta1.proto` declares the messages and services with the field numbers of Kubernetes' own
api.proto; `v1beta1_pb2.py` / `.pyi` are generated from it (hack/gen-deviceplugin-proto.sh,
never edited by hand); `services.py` binds the two services to grpc by hand, typed, so the
code above it is checked by mypy like every other module.
"""
