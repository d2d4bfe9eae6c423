"""Typed gRPC bindings of the two device plugin services, for both of their ends.

Why hand-written instead of a generated `_pb2_grpc.py`: the generated module pins the grpcio
version that generated it and carries no types. The bindings are a table of five method
names here; what the kubelet calls is checked by mypy against the `Servicer` protocol below.

- `DevicePlugin` is served by a plugin (`device_plugin_handler`) and called by the kubelet
  (`DevicePluginStub`, which tests use as the kubelet).
- `Registration` is served by the kubelet (`registration_handler`, which tests use as a fake
  kubelet) and called by a plugin (`RegistrationStub`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeAlias

import grpc
from ultraplane.simulator.deviceplugin import v1beta1_pb2 as pb

VERSION = "v1beta1"  # the API version a plugin registers with
KUBELET_SOCKET = "kubelet.sock"  # the kubelet's Registration socket in the plugin directory
DEVICE_PLUGIN = "v1beta1.DevicePlugin"
REGISTRATION = "v1beta1.Registration"
# A service's handler serves several message types, so its type parameters are Any (a string:
# grpc's runtime class is not generic, only its stubs are).
Handler: TypeAlias = "grpc.GenericRpcHandler[Any, Any]"


class DevicePluginServicer(Protocol):
    """The five RPCs of `v1beta1.DevicePlugin`."""

    def GetDevicePluginOptions(self, request: pb.Empty,
                               context: grpc.ServicerContext) -> pb.DevicePluginOptions: ...

    def ListAndWatch(self, request: pb.Empty,
                     context: grpc.ServicerContext) -> Iterator[pb.ListAndWatchResponse]: ...

    def GetPreferredAllocation(self, request: pb.PreferredAllocationRequest,
                               context: grpc.ServicerContext) -> pb.PreferredAllocationResponse: ...

    def Allocate(self, request: pb.AllocateRequest,
                 context: grpc.ServicerContext) -> pb.AllocateResponse: ...

    def PreStartContainer(self, request: pb.PreStartContainerRequest,
                          context: grpc.ServicerContext) -> pb.PreStartContainerResponse: ...


def device_plugin_handler(servicer: DevicePluginServicer) -> Handler:
    unary = grpc.unary_unary_rpc_method_handler
    return grpc.method_handlers_generic_handler(DEVICE_PLUGIN, {
        "GetDevicePluginOptions": unary(
            servicer.GetDevicePluginOptions, request_deserializer=pb.Empty.FromString,
            response_serializer=pb.DevicePluginOptions.SerializeToString),
        "ListAndWatch": grpc.unary_stream_rpc_method_handler(
            servicer.ListAndWatch, request_deserializer=pb.Empty.FromString,
            response_serializer=pb.ListAndWatchResponse.SerializeToString),
        "GetPreferredAllocation": unary(
            servicer.GetPreferredAllocation,
            request_deserializer=pb.PreferredAllocationRequest.FromString,
            response_serializer=pb.PreferredAllocationResponse.SerializeToString),
        "Allocate": unary(
            servicer.Allocate, request_deserializer=pb.AllocateRequest.FromString,
            response_serializer=pb.AllocateResponse.SerializeToString),
        "PreStartContainer": unary(
            servicer.PreStartContainer, request_deserializer=pb.PreStartContainerRequest.FromString,
            response_serializer=pb.PreStartContainerResponse.SerializeToString),
    })


def registration_handler(
        register: Callable[[pb.RegisterRequest, grpc.ServicerContext], pb.Empty],
) -> Handler:
    return grpc.method_handlers_generic_handler(REGISTRATION, {
        "Register": grpc.unary_unary_rpc_method_handler(
            register, request_deserializer=pb.RegisterRequest.FromString,
            response_serializer=pb.Empty.SerializeToString),
    })


class RegistrationStub:
    """The plugin's end of `v1beta1.Registration`."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.Register: grpc.UnaryUnaryMultiCallable[pb.RegisterRequest, pb.Empty] = (
            channel.unary_unary(f"/{REGISTRATION}/Register",
                                request_serializer=pb.RegisterRequest.SerializeToString,
                                response_deserializer=pb.Empty.FromString))


class DevicePluginStub:
    """The kubelet's end of `v1beta1.DevicePlugin`."""

    def __init__(self, channel: grpc.Channel) -> None:
        path = f"/{DEVICE_PLUGIN}/"
        self.GetDevicePluginOptions: grpc.UnaryUnaryMultiCallable[
            pb.Empty, pb.DevicePluginOptions] = channel.unary_unary(
                path + "GetDevicePluginOptions", request_serializer=pb.Empty.SerializeToString,
                response_deserializer=pb.DevicePluginOptions.FromString)
        self.ListAndWatch: grpc.UnaryStreamMultiCallable[
            pb.Empty, pb.ListAndWatchResponse] = channel.unary_stream(
                path + "ListAndWatch", request_serializer=pb.Empty.SerializeToString,
                response_deserializer=pb.ListAndWatchResponse.FromString)
        self.GetPreferredAllocation: grpc.UnaryUnaryMultiCallable[
            pb.PreferredAllocationRequest, pb.PreferredAllocationResponse] = channel.unary_unary(
                path + "GetPreferredAllocation",
                request_serializer=pb.PreferredAllocationRequest.SerializeToString,
                response_deserializer=pb.PreferredAllocationResponse.FromString)
        self.Allocate: grpc.UnaryUnaryMultiCallable[
            pb.AllocateRequest, pb.AllocateResponse] = channel.unary_unary(
                path + "Allocate", request_serializer=pb.AllocateRequest.SerializeToString,
                response_deserializer=pb.AllocateResponse.FromString)
        self.PreStartContainer: grpc.UnaryUnaryMultiCallable[
            pb.PreStartContainerRequest, pb.PreStartContainerResponse] = channel.unary_unary(
                path + "PreStartContainer",
                request_serializer=pb.PreStartContainerRequest.SerializeToString,
                response_deserializer=pb.PreStartContainerResponse.FromString)
