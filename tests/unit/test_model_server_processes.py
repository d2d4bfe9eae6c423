"""`ultraplane model-server` and `ultraplane load-generator`: a trace offered round robin over
the addresses the target resolves to, re-sent where a replica does not answer, and accounted
by each model server into vLLM's metrics as the operator's direct scrape reads them."""

from __future__ import annotations

import csv
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from ultraplane.operator.loadreaders import parse_exposition
from ultraplane.simulator.loadgenerators import LoadGenerator, http_post, resolver
from ultraplane.simulator.replicaservers import ReplicaServer, parse_batch
from ultraplane.simulator.servingcommands import load_generator, model_server

from ultraplane.serving.replicas import replica_for
from ultraplane.serving.requesttraces import RateSteps, RequestTrace

RATE = 10  # requests/s of the steady trace


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def steady(tmp: Path, rate: int = RATE, seconds: int = 60) -> Path:
    path = tmp / "trace.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for i in range(rate * seconds):
            s = i / rate
            w.writerow([f"2024-01-01 00:{int(s // 60):02d}:{s % 60:09.6f}", 1000 + i % 7, 100])
    return path


@pytest.fixture
def server() -> Iterator[tuple[ReplicaServer, Clock]]:
    clock = Clock()
    s = ReplicaServer(replica_for("llama-3-8b", chips=4), host="127.0.0.1", port=0,
                      tick_s=3600, clock=clock)
    thread = threading.Thread(target=s.http.serve_forever, daemon=True)
    thread.start()
    yield s, clock
    s.http.shutdown()
    s.http.server_close()


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize(("body", "why"), [
    (b"[1]", "JSON object"),
    (b"{", "not JSON"),
    (b'{"promptTokens": [1, 2], "outputTokens": [1]}', "same length"),
    (b'{"promptTokens": [0], "outputTokens": [1]}', "at least 1"),
    (b'{"promptTokens": [true], "outputTokens": [1]}', "at least 1"),
])
def test_a_bad_batch_is_refused_with_a_sentence(body: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_batch(body)


def test_requests_posted_to_a_model_server_show_in_its_vllm_metrics(
        server: tuple[ReplicaServer, Clock]) -> None:
    s, clock = server
    post = http_post(s.port)
    assert post("127.0.0.1", [1000] * 20, [100] * 20)
    assert not post("127.0.0.1", [1000], [])  # refused: 400
    clock.t += 2.0
    assert s.batches.tick() == 20
    code, text = get(s.port, "/metrics")
    assert code == 200 and "vllm:request_success_total" in text
    sample = parse_exposition(text, clock.t)
    assert sample.requests == 20 and sample.prompt_tokens == 20_000
    assert sample.output_tokens == 2000
    assert sample.ttft.buckets[-1][1] == 20  # every request had its first token
    assert get(s.port, "/health")[0] == 200
    assert get(s.port, "/nothing")[0] == 404


def test_the_generator_spreads_a_tick_round_robin_and_resends_what_a_replica_refused(
        tmp_path: Path) -> None:
    clock = Clock()
    got: dict[str, int] = {}
    down = {"10.0.0.2"}

    def post(address: str, prompts: list[int], outputs: list[int]) -> bool:
        if address in down:
            return False
        got[address] = got.get(address, 0) + len(prompts)
        return True

    addresses = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    gen = LoadGenerator(RequestTrace.load(steady(tmp_path)), RateSteps.parse("0:1,10:3"),
                        resolve=lambda: addresses, post=post, clock=clock)
    clock.t += 3.0
    offer = gen.tick()
    # 30 requests: 10 each, the refused replica's 10 re-sent to the two that answered
    assert offer.sent == {"10.0.0.1": 15, "10.0.0.3": 15} and offer.dropped == 0
    down.clear()
    clock.t += 9.0  # to t=12: the tick starting at 3 s is offered at x1 (9 s, 90 requests)
    assert sum(gen.tick().sent.values()) == 90
    clock.t += 2.0  # from t=12, x3
    assert gen.tick().sent == {a: 20 for a in addresses}
    addresses.clear()
    clock.t += 1.0
    assert gen.tick().dropped == 30


def test_a_generator_and_a_server_over_http_and_a_name_that_resolves(
        tmp_path: Path, server: tuple[ReplicaServer, Clock]) -> None:
    s, clock = server
    assert resolver("localhost")() == ["127.0.0.1"]
    assert resolver("no-such-name.invalid")() == []
    gen = LoadGenerator(RequestTrace.load(steady(tmp_path)), RateSteps(),
                        resolve=resolver("localhost"), post=http_post(s.port), clock=clock)
    clock.t += 5.0
    assert gen.tick().sent == {"127.0.0.1": 5 * RATE}
    assert s.batches.tick() == 5 * RATE
    assert parse_exposition(get(s.port, "/metrics")[1], clock.t).requests == 5 * RATE


@pytest.mark.parametrize(("command", "args", "says"), [
    (model_server, ["--model", "llama-3-8b"], "--chips"),
    (model_server, ["--model", "llama-3-8b", "--chips", "0"], "--chips"),
    (model_server, ["--model", "llama-3-8b", "--chips", "4", "--profile", "trn9"], "trn9"),
    (load_generator, ["--trace", "TRACE", "--target", "x", "--rate-steps", "0:fast"], "0:fast"),
    (load_generator, ["--trace", "EMPTY", "--target", "x"], "columns"),
    (load_generator, ["--trace", "TRACE"], "--target"),
])
def test_bad_options_exit_2_with_a_sentence(tmp_path: Path, command: object, args: list[str],
                                            says: str) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("a,b\n1,2\n")
    args = [str(steady(tmp_path)) if a == "TRACE" else str(empty) if a == "EMPTY" else a
            for a in args]
    result = CliRunner().invoke(command, args, env={"ULTRAPLANE_TOTAL_CHIPS": ""})  # type: ignore[arg-type]
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and says in result.output, result.output
