"""Fuzz tier: deep, wide and large bodies and hostile headers against the real server.

Schemathesis (test_api_schemathesis.py) covers what the OpenAPI document describes; these
generators cover what it cannot: JSON nested thousands deep, objects with tens of thousands
of keys, bodies at and past the size limit, free-form values anywhere in a job's spec,
headers that lie about the body, very long or non-ASCII headers, and clients that send
half a request and stop. The server is the real app behind a real uvicorn server with the
options of `ultraplane serve`. Every answer must be below 500, and `/readyz` must stay ready
(a half-made job would break the next tick).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ultraplane.api.settings import Settings

from tests.integration.apiservers import LiveServer, live_server

SOME = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
PATHS = ["/v1/namespaces/fuzz/trainingjobs", "/v1/namespaces/fuzz/inferencejobs",
         "/v1/placements:dryRun"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = tmp_path_factory.mktemp("fuzz") / "api.db"
    with live_server(Settings(db=f"sqlite:///{db}", demo=True, tick_seconds=0.05,
                              time_scale=600, request_read_seconds=1.0,
                              rate_limit_dryruns="off", rate_limit_writes="off",
                              rate_limit_reads="off")) as live:
        yield live
        # after every test of the module: the fleet still ticks and is ready
        deadline = time.monotonic() + 30
        while httpx.get(f"{live.url}/readyz").status_code != 200:
            assert time.monotonic() < deadline, httpx.get(f"{live.url}/readyz").text
            time.sleep(0.1)


@pytest.fixture(scope="module")
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def check(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])


def ready(http: httpx.Client, server: LiveServer) -> None:
    server.backend.tick()  # a half-made job would make this raise
    r = http.get("/readyz")
    assert r.status_code == 200, r.text
    for path in ("/v1/trainingjobs", "/v1/inferencejobs", "/v1/ultraservers"):
        check(http.get(path))


def nested(depth: int, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


@SOME
@given(depth=st.integers(1, 20_000), kind=st.sampled_from(["list", "object"]),
       path=st.sampled_from(PATHS), where=st.sampled_from(["body", "template", "spec-field"]))
def test_deep_bodies(server: LiveServer, http: httpx.Client, depth: int, kind: str, path: str,
                     where: str) -> None:
    deep = nested(depth, kind)
    if where == "body":
        body = deep
    elif where == "template":
        body = ('{"metadata":{"name":"deep"},"spec":{"chips":4,"work":{"durationSeconds":60},'
                '"template":{"spec":{"containers":[{"name":"c","image":"i","args":'
                + deep + "}]}}}}")
    else:
        body = '{"metadata":{"name":"deep"},"spec":{"chips":' + deep + "}}"
    check(http.post(path, content=body, headers={"content-type": "application/json"}))
    ready(http, server)


@SOME
@given(keys=st.integers(1, 80_000), path=st.sampled_from(PATHS),
       where=st.sampled_from(["top", "labels", "template"]))
def test_wide_bodies(server: LiveServer, http: httpx.Client, keys: int, path: str,
                     where: str) -> None:
    wide = {f"k{i}": i for i in range(keys)}
    spec: dict[str, Any] = {"chips": 4, "work": {"durationSeconds": 60}}
    meta: dict[str, Any] = {"name": f"wide-{keys}"}
    if where == "top":
        spec.update(wide)
    elif where == "labels":
        meta["labels"] = {k: "v" for k in wide}
    else:
        spec["template"] = {"spec": {"containers": [{"name": "c", "image": "i", "env": wide}]}}
    check(http.post(path, json={"metadata": meta, "spec": spec}))
    ready(http, server)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner,
                                                                 max_size=5),
    max_leaves=40)


@SOME
@given(path=st.sampled_from(PATHS), field=st.sampled_from(
    ["chips", "priority", "topology", "work", "template", "profile", "replicas", "model",
     "load", "failurePolicy", "labels", "name"]), value=json_values,
    name=st.text(min_size=1, max_size=70))
def test_free_values_anywhere(server: LiveServer, http: httpx.Client, path: str, field: str,
                              value: Any, name: str) -> None:
    spec: dict[str, Any] = {"chips": 4, "work": {"durationSeconds": 60}, field: value}
    body = {"apiVersion": "ultraplane.dev/v1alpha1", "metadata": {"name": name}, "spec": spec}
    try:
        content = json.dumps(body, allow_nan=True)
    except ValueError:
        return
    check(http.post(path, content=content, headers={"content-type": "application/json"}))
    bare = json.dumps(value, allow_nan=True)  # the value alone as the whole body
    check(http.post(path, content=bare, headers={"content-type": "application/json"}))


@pytest.mark.parametrize("size", [1 << 20, (1 << 20) + 1, 4 << 20])
def test_large_bodies(server: LiveServer, http: httpx.Client, size: int) -> None:
    filler = "x" * max(0, size - 120)
    body = ('{"metadata":{"name":"large"},"spec":{"chips":4,"work":{"durationSeconds":60},'
            '"template":{"a":"' + filler + '"}}}')
    r = http.post(PATHS[0], content=body, headers={"content-type": "application/json"})
    check(r)
    if len(body) > (1 << 20):
        assert r.status_code == 413
    ready(http, server)


header_values = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7e),
                        max_size=200) | st.just("x" * 60_000) | st.just("\u00e9\u00e8")


@SOME
@given(name=st.sampled_from(["content-type", "content-length", "authorization", "accept",
                             "transfer-encoding", "x-forwarded-for", "host", "expect",
                             "content-encoding", "cookie"]),
       value=header_values, path=st.sampled_from([*PATHS, "/v1/ultraservers", "/readyz"]))
def test_hostile_headers(server: LiveServer, name: str, value: str, path: str) -> None:
    """Raw sockets: a client may send anything, including headers httpx would refuse."""
    body = b'{"chips": 4}'
    head = (f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {len(body)}\r\n"
            "content-type: application/json\r\n").encode()
    if name in ("content-length", "content-type", "host"):
        head = b"\r\n".join(line for line in head.split(b"\r\n")
                            if not line.lower().startswith(name.encode())) + b"\r\n"
    raw = head + name.encode() + b": " + value.encode("utf-8") + b"\r\nconnection: close\r\n\r\n"
    answer = exchange(server.port, raw + body)
    if answer:  # else the server closed the connection: refused at the protocol level
        status = int(answer.split(b" ", 2)[1])
        assert status < 500, answer[:500]


def exchange(port: int, data: bytes, *, timeout: float = 20) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except OSError:
            return b""
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError):
            pass
        return b"".join(chunks)


@pytest.mark.parametrize("partial", [
    b"",
    b"POST /v1/placements:dryRun HTTP/1.1\r\nhost: x\r\n",
    b"POST /v1/placements:dryRun HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{",
    b"POST /v1/placements:dryRun HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\n",
])
def test_half_sent_requests_are_closed_at_the_deadline(server: LiveServer, http: httpx.Client,
                                                       partial: bytes) -> None:
    held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(20)]
    try:
        for s in held:
            s.sendall(partial)
            s.settimeout(15)
        started = time.monotonic()
        for s in held:  # each closed by the server (read deadline 1 s), not left open
            while s.recv(65536):  # a timeout here (15 s) fails the test
                pass
        assert time.monotonic() - started < 15
        check(http.get("/v1/ultraservers"))
    finally:
        for s in held:
            s.close()


def test_connection_cap_answers_503_not_hang(tmp_path: Path) -> None:
    with live_server(Settings(db=f"sqlite:///{tmp_path / 'cap.db'}", demo=False,
                              max_connections=8, request_read_seconds=3.0)) as live:
        idle = [socket.create_connection(("127.0.0.1", live.port)) for _ in range(8)]
        try:
            r = exchange(live.port, b"GET /v1/ultraservers HTTP/1.1\r\nhost: x\r\n"
                                    b"connection: close\r\n\r\n")
            assert r.startswith(b"HTTP/1.1 503"), r[:200]
            deadline = time.monotonic() + 20  # the idle ones are closed at the read deadline
            while True:
                r = exchange(live.port, b"GET /v1/ultraservers HTTP/1.1\r\nhost: x\r\n"
                                        b"connection: close\r\n\r\n")
                if r.startswith(b"HTTP/1.1 200") or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert r.startswith(b"HTTP/1.1 200"), r[:200]
        finally:
            for s in idle:
                s.close()


@pytest.mark.parametrize("size", [1_000_000, 4_000_000])
def test_endless_headers_get_431(server: LiveServer, http: httpx.Client, size: int) -> None:
    head = b"GET /v1/ultraservers HTTP/1.1\r\nhost: x\r\n"
    filler = b"".join(b"x-filler-%d: %s\r\n" % (i, b"y" * 1000) for i in range(size // 1000))
    answer = exchange(server.port, head + filler + b"connection: close\r\n\r\n")
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer[:200]
    check(http.get("/v1/ultraservers"))


def test_keep_alive_with_large_bodies_is_not_mistaken_for_large_headers(
        server: LiveServer) -> None:
    body = json.dumps({"chips": 4, "x": "y" * 300_000}).encode()
    request = (b"POST /v1/placements:dryRun HTTP/1.1\r\nhost: x\r\ncontent-type: "
               b"application/json\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n"
               + body)
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as s:
        for _ in range(3):
            s.sendall(request)
            got = b""
            while b"\r\n\r\n" not in got:
                got += s.recv(65536)
            assert got.startswith(b"HTTP/1.1 422"), got[:200]  # unknown field x, not 431
            length = int(got.split(b"content-length: ")[1].split(b"\r\n")[0])
            rest = got.split(b"\r\n\r\n", 1)[1]
            while len(rest) < length:
                rest += s.recv(65536)
