"""The dashboard in a real headless Chromium against a real `ultraplane serve`.

Fleet (a cluster file, so a failed chip is there from the start):

    gen2-0000  [36 servers x 4 chips]   s03/c01 failed
    gen2-0001  [36 servers x 4 chips]

A job submitted over HTTP must appear on the page, chip for chip where the API says it was
placed and in the colour the legend gives it; a job that cannot fit must appear in the queue
with its reason. With tokens configured the page asks for one, and a token scoped to one
namespace shows that namespace's jobs by name and the others' chips only as "another
tenant". Past 128 UltraServers each is a bar; under `serve --backend kubernetes` (the real
API server tier) the page draws the custom resources. Pages may reach only the server
(browsers.Offline). Screenshots:
build/artifacts/screenshots/dashboard-*.png.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.integration.browsers import chromium, offline_page, screenshot, served, until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

CLUSTER = """\
ultraservers:
  - name: gen2-0000
    profile: trn3-gen2
    network: [block-000]
    failedChips: [s03/c01]
  - name: gen2-0001
    profile: trn3-gen2
    network: [block-000]
"""
FAST = ("--no-demo", "--tick-seconds", "0.2", "--time-scale", "60")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


def cluster_file(folder: Path) -> str:
    path = folder / "cluster.yaml"
    path.write_text(CLUSTER)
    return str(path)


def submit(url: str, namespace: str, name: str, chips: int, *, token: str | None = None,
           level: str = "ultraserver", seconds: int = 36000) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = {"metadata": {"name": name},
            "spec": {"chips": chips, "topology": {"requiredLevel": level},
                     "work": {"durationSeconds": seconds}}}
    answer = httpx.post(f"{url}/v1/namespaces/{namespace}/trainingjobs", json=body,
                        headers=headers, timeout=10)
    assert answer.status_code == 201, answer.text


def allocation(url: str, namespace: str, name: str, token: str | None = None) -> list[str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    job = httpx.get(f"{url}/v1/namespaces/{namespace}/trainingjobs/{name}", headers=headers,
                    timeout=10).json()
    return list((job.get("status", {}).get("allocation") or {}).get("chips") or [])


def chips_of(page: Any, job: str) -> list[str]:
    return sorted(page.eval_on_selector_all(
        f'.chip[data-job="{job}"]', "nodes => nodes.map(n => n.dataset.chip)"))


def test_renders_the_fleet_and_updates_when_a_job_is_admitted(tmp_path: Path,
                                                              browser: Any) -> None:
    with served(tmp_path, "--cluster", cluster_file(tmp_path), *FAST) as url, \
            offline_page(browser, "dashboard-fleet") as (page, offline, errors):
        page.goto(f"{url}/?poll=0.5")
        page.wait_for_selector('[data-ultraserver="gen2-0001"] .chip')
        assert page.locator("[data-ultraserver]").count() == 2
        assert page.locator(".chip").count() == 288
        assert chips_of(page, "failed") == ["gen2-0000/s03/c01"]
        assert until(lambda: page.inner_text("#fleet-power") not in ("-", "0 W"),
                     "the fleet's power")
        assert page.inner_text("#fleet-failed") == "1"
        assert page.locator('.chip[data-job="free"]').count() == 287

        submit(url, "team-a", "train-1", 16, level="rack")
        placed = sorted(until(lambda: allocation(url, "team-a", "train-1"), "train-1 placed"))
        assert len(placed) == 16
        until(lambda: chips_of(page, "tj/team-a/train-1") == placed,
              "train-1's chips on the page")
        swatch = page.locator('#legend li[data-job="tj/team-a/train-1"] .swatch')
        legend_colour = swatch.evaluate("n => getComputedStyle(n).backgroundColor")
        chip_colours = set(page.eval_on_selector_all(
            '.chip[data-job="tj/team-a/train-1"]',
            "nodes => nodes.map(n => getComputedStyle(n).backgroundColor)"))
        assert chip_colours == {legend_colour}
        free = page.eval_on_selector('.chip[data-job="free"]',
                                     "n => getComputedStyle(n).backgroundColor")
        assert legend_colour != free
        until(lambda: page.inner_text("#fleet-chips") == "16 / 288", "the chips-in-use total")
        us = placed[0].split("/")[0]
        power = page.locator(f'[data-ultraserver="{us}"] [data-role="power"]')
        assert power.inner_text().endswith("W")

        # One job takes gen2-0001 whole; the next whole UltraServer must wait for train-1.
        submit(url, "team-a", "block", 144, level="ultraserver")
        assert until(lambda: allocation(url, "team-a", "block"), "block placed")[0].startswith(
            "gen2-0001/")
        submit(url, "team-a", "whole", 144, level="ultraserver")
        row = page.locator('#queue tr[data-job="tj/team-a/whole"]')
        until(lambda: row.count() == 1 and "NoCapacity" in row.inner_text(),
              "the waiting job in the queue with its reason")
        status = httpx.get(f"{url}/v1/namespaces/team-a/trainingjobs/whole", timeout=10
                           ).json()["status"]
        cells = row.locator("td").all_inner_texts()
        assert cells[0] == str(status["queuePosition"])
        assert cells[2] == "144" and cells[4] == "NoCapacity"
        # (its message's predicted times move with the clock: compare the first clause)
        assert cells[6].split(";")[0] == status["message"].split(";")[0]
        assert cells[5] != "", "the predicted start column is filled"
        until(lambda: page.inner_text("#fleet-queued") == "1", "the queued total")
        until(lambda: page.inner_text("#fleet-chips") == "160 / 288", "the chips in use")
        assert page.locator('.chip[data-job="tj/team-a/block"]').count() == 144
        assert offline.attempts == []
        assert not errors, errors


def test_a_scoped_token_sees_its_own_jobs_and_only_chips_of_others(tmp_path: Path,
                                                                   browser: Any) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("admin-secret name=admin\n"
                      "team-a-secret namespaces=team-a verbs=get,list name=team-a\n")
    with served(tmp_path, "--cluster", cluster_file(tmp_path), "--token-file", str(tokens),
                *FAST) as url, \
            offline_page(browser, "dashboard-tenant") as (page, offline, errors):
        submit(url, "team-a", "mine", 16, token="admin-secret", level="rack")
        submit(url, "team-b", "theirs", 36, token="admin-secret", level="ultraserver")
        mine = sorted(until(lambda: allocation(url, "team-a", "mine", "admin-secret"),
                            "mine placed"))
        until(lambda: allocation(url, "team-b", "theirs", "admin-secret"), "theirs placed")

        page.goto(f"{url}/?poll=0.5")
        page.wait_for_selector("#login[open]")
        page.fill("#token", "wrong")
        page.click("#login button[type=submit]")
        until(lambda: page.locator("#login-error").is_visible()
              and "not accepted" in page.inner_text("#login-error"), "the refusal")
        page.fill("#token", "team-a-secret")
        page.click("#login button[type=submit]")
        until(lambda: chips_of(page, "tj/team-a/mine") == mine, "team-a's chips")
        until(lambda: page.locator('.chip[data-job="other"]').count() == 36,
              "team-b's 36 chips as another tenant")
        assert page.evaluate("sessionStorage.getItem('ultraplane.token')") == "team-a-secret"
        assert "signed in as team-a" in page.inner_text("#who")
        legend = page.locator("#legend li").all_inner_texts()
        assert any("tj/team-a/mine" in t for t in legend)
        assert any("another tenant" in t for t in legend)
        text = page.inner_text("body")
        titles = " ".join(page.eval_on_selector_all("[title]", "ns => ns.map(n => n.title)"))
        assert "team-b" not in text and "theirs" not in text
        assert "team-b" not in titles and "theirs" not in titles

        # A new job of this tenant appears without reloading; signing out forgets the token.
        submit(url, "team-a", "mine-2", 4, token="admin-secret", level="server")
        until(lambda: page.locator('.chip[data-job="tj/team-a/mine-2"]').count() == 4,
              "team-a's second job")
        screenshot(page, "dashboard-tenant-signed-in")
        page.click("#sign-out")
        page.wait_for_selector("#login[open]")
        assert page.evaluate("sessionStorage.getItem('ultraplane.token')") is None
        assert page.locator(".chip").count() == 0 and page.locator("#legend li").count() == 0
        assert offline.attempts == []
        assert not [e for e in errors if "401" not in e], errors


def test_a_large_fleet_is_drawn_as_bars(tmp_path: Path, browser: Any) -> None:
    """Past 128 UltraServers each one is a bar of its used chips, not 64+ chip elements."""
    with served(tmp_path, "--fleet", "trn2:130", *FAST) as url, \
            offline_page(browser, "dashboard-large-fleet") as (page, offline, errors):
        page.goto(f"{url}/?poll=0.5")
        page.wait_for_selector('[data-ultraserver] .bar')
        assert page.locator("[data-ultraserver] .bar").count() == 130
        assert page.locator(".chip").count() == 0
        submit(url, "team-a", "whole", 64, level="ultraserver")
        us = until(lambda: allocation(url, "team-a", "whole"), "whole placed")[0].split("/")[0]
        used = page.locator(f'[data-ultraserver="{us}"] .bar .used')
        until(lambda: used.evaluate("n => n.style.width") == "100%", "the full UltraServer's bar")
        until(lambda: page.inner_text("#fleet-chips") == f"64 / {130 * 64}", "the fleet total")
        assert offline.attempts == []
        assert not errors, errors


def test_kubernetes_mode_draws_the_custom_resources(tmp_path: Path, browser: Any,
                                                    kube_env: Any, kube_namespace: str) -> None:
    """`serve --backend kubernetes` on the real API server tier: the page draws an UltraServer
    object and a job whose status (written here, as the operator would) holds its chips."""
    name = f"dash-{uuid.uuid4().hex[:6]}"
    kube_env.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "ultraplane.dev/v1alpha1", "kind": "UltraServer", "metadata": {"name": name},
        "spec": {"profile": "trn3-gen2", "network": ["block-dash"], "failedChips": ["s01/c02"]}}))
    env = {"KUBECONFIG": str(kube_env.kubeconfig),
           "ULTRAPLANE_KUBECONFIG": str(kube_env.kubeconfig)}
    try:
        with served(tmp_path, "--backend", "kubernetes", "--tick-seconds", "0.5",
                    env=env) as url, \
                offline_page(browser, "dashboard-kubernetes") as (page, offline, errors):
            submit(url, kube_namespace, "llm", 4, level="server")
            chips = [f"{name}/s00/c0{i}" for i in range(4)]
            status = {"phase": "Running", "startTime": "2026-01-01T00:00:00Z",
                      "allocation": {"ultraServers": [name], "servers": [f"{name}/s00"],
                                     "chips": chips, "level": "server", "score": 1.0}}
            kube_env.kubectl("patch", "-n", kube_namespace, "trainingjob", "llm",
                             "--subresource=status", "--type=merge",
                             "-p", json.dumps({"status": status}))
            job = f"tj/{kube_namespace}/llm"
            kube_env.kubectl("patch", "ultraserver", name, "--subresource=status", "--type=merge",
                             "-p", json.dumps({"status": {
                                 "allocated": {"chips": 4}, "jobs": [job],
                                 "powerWatts": 1234.0, "utilization": 0.5}}))
            page.goto(f"{url}/?poll=0.5")
            card = page.locator(f'[data-ultraserver="{name}"]')
            until(lambda: card.count() == 1, f"UltraServer {name} on the page")
            until(lambda: "4/144 chips" in card.inner_text(), "the UltraServer's status")
            assert "1.2 kW" in card.inner_text()
            if card.locator(".chip").count():  # drawn chip by chip (at most 128 UltraServers)
                until(lambda: chips_of(page, job) == chips, "the job's chips")
                assert [c for c in chips_of(page, "failed") if c.startswith(name)] == [
                    f"{name}/s01/c02"]
            else:  # the tier holds other tests' UltraServers too: drawn as bars
                assert card.locator(".bar .used").evaluate("n => n.style.width").startswith("2.7")
            until(lambda: page.locator(f'#legend li[data-job="{job}"]').count() == 1,
                  "the job in the legend")
            assert offline.attempts == []
            assert not errors, errors
    finally:
        kube_env.kubectl("delete", "ultraserver", name, "--wait=false", check=False)


def test_teams_show_their_quota_use_and_borrowing(tmp_path: Path, browser: Any) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text("- name: research\n  nominal: {trn3-gen2: 144}\n  cohort: lab\n"
                      "  defaultFor: [team-a]\n- name: serving\n  nominal: {trn3-gen2: 144}\n"
                      "  cohort: lab\n")
    with served(tmp_path, "--cluster", cluster_file(tmp_path), "--queues", str(queues),
                *FAST) as url, offline_page(browser, "dashboard-teams") as (page, offline, errors):
        page.goto(f"{url}/?poll=0.5")
        row = page.locator('#queues tr[data-queue="research"]')
        until(lambda: row.count() == 1, "the research queue's row")
        assert page.locator("#teams").is_visible()
        submit(url, "team-a", "one", 143, level="ultraserver")  # the failed chip leaves 143
        submit(url, "team-a", "two", 144, level="ultraserver")  # borrowed from serving
        until(lambda: row.locator("td").all_inner_texts()[2:6] == ["144", "287", "143", "0"],
              "research using its quota and borrowing serving's")
        label = row.locator(".bar").get_attribute("aria-label")
        # serving wants nothing, so research's fair share is all it wants: 287 chips
        assert label == "287 of 144 nominal chips in use, 143 borrowed, fair share 287"
        widths = row.locator(".bar span").evaluate_all(
            "nodes => nodes.map(n => n.getBoundingClientRect().width)")
        assert widths[0] > 0 and widths[1] > 0  # its own share and the borrowed one, both drawn
        serving = page.locator('#queues tr[data-queue="serving"] td').all_inner_texts()
        assert serving[2:6] == ["144", "0", "0", "0"]
        assert offline.attempts == []
        assert not errors, errors


def test_no_teams_section_without_queues(tmp_path: Path, browser: Any) -> None:
    with served(tmp_path, "--cluster", cluster_file(tmp_path), *FAST) as url, \
            offline_page(browser, "dashboard-no-teams") as (page, _offline, errors):
        page.goto(f"{url}/?poll=0.5")
        page.wait_for_selector('[data-ultraserver="gen2-0001"] .chip')
        until(lambda: page.inner_text("#live").startswith("live"), "the first refresh")
        assert not page.locator("#teams").is_visible()
        assert not errors, errors


def test_power_budgets_show_their_draw_against_the_limit(tmp_path: Path, browser: Any) -> None:
    # two Gen2 UltraServers idle at the assumed 300 W a chip: 86.4 kW; the limit leaves 100 kW
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text("- name: hall\n  watts: 186400\n")
    with served(tmp_path, "--cluster", cluster_file(tmp_path), "--power-budgets", str(budgets),
                *FAST) as url, offline_page(browser, "dashboard-power") as (page, offline, errors):
        page.goto(f"{url}/?poll=0.5")
        row = page.locator('#power tr[data-budget="hall"]')
        until(lambda: row.count() == 1, "the hall budget's row")
        cells = row.locator("td").all_inner_texts()
        assert cells[:2] == ["hall", "186.4 kW"]
        submit(url, "team-a", "big", 143, level="ultraserver")
        until(lambda: allocation(url, "team-a", "big"), "big placed")

        def drawn() -> list[str] | None:
            got = row.locator("td").all_inner_texts()
            return got if got[2] != "86.4 kW" else None
        cells = until(drawn, "the predicted draw to include the job")
        predicted = float(cells[2].split()[0])
        assert 86.4 < predicted <= 186.4
        assert cells[4].endswith(" kW")
        assert abs(float(cells[4].split()[0]) - (186.4 - predicted)) <= 0.11  # (each rounded)
        label = row.locator(".bar").get_attribute("aria-label")
        assert label == f"predicted {cells[2]} of 186.4 kW"
        assert offline.attempts == []
        assert not errors, errors


def serve_inference(url: str, name: str, replicas: int) -> None:
    body = {"metadata": {"name": name},
            "spec": {"replicas": replicas, "chipsPerReplica": 4, "model": {"name": "llama"},
                     "topology": {"requiredLevel": "server"},
                     "load": {"requestsPerSecond": 20},
                     "latencySLO": {"timeToFirstTokenMs": 900}}}
    answer = httpx.post(f"{url}/v1/namespaces/team-a/inferencejobs", json=body, timeout=10)
    assert answer.status_code == 201, answer.text


def test_an_inference_service_is_charted_and_follows_a_rescale(tmp_path: Path,
                                                              browser: Any) -> None:
    with served(tmp_path, "--cluster", cluster_file(tmp_path), *FAST) as url, \
            offline_page(browser, "dashboard-services") as (page, offline, errors):
        page.goto(f"{url}/?poll=0.5")
        page.wait_for_selector('[data-ultraserver="gen2-0001"] .chip')
        assert not page.locator("#services").is_visible()
        serve_inference(url, "chat", 2)
        card = page.locator('[data-service="ij/team-a/chat"]')
        until(lambda: card.count() == 1, "chat's chart")
        ready = card.locator('[data-series="ready"]')
        desired = card.locator('[data-series="desired"]')
        until(lambda: ready.get_attribute("data-last") == "2", "2 ready replicas charted")
        assert desired.get_attribute("data-last") == "2"
        assert len(ready.get_attribute("points").split()) >= 2  # a line, not a dot
        # the embedded fleet reports no observed load or TTFT: said, not drawn as zero
        assert card.locator('[data-chart="load"] polyline').count() == 0
        assert "no load reported" in card.locator('[data-chart="load"]').text_content()
        assert card.locator('[data-chart="ttft"] [data-series="objective"]'
                            ).get_attribute("data-last") == "900"
        assert "objective 900 ms" in card.locator(".facts").inner_text()

        answer = httpx.patch(f"{url}/v1/namespaces/team-a/inferencejobs/chat",
                             json={"spec": {"replicas": 5}}, timeout=10)
        assert answer.status_code == 200, answer.text
        until(lambda: ready.get_attribute("data-last") == "5", "the ready line at 5")
        assert desired.get_attribute("data-last") == "5"
        ys = [float(p.split(",")[1]) for p in ready.get_attribute("points").split()]
        assert min(ys) < max(ys), "the line steps up (SVG y grows downwards)"
        assert ys[-1] == min(ys)
        until(lambda: "5/5 replicas ready" in card.locator(".facts").inner_text(),
              "the service's figures now")
        assert offline.attempts == []
        assert not errors, errors


def test_queues_show_their_fair_share_beside_the_chips_they_hold(tmp_path: Path,
                                                                 browser: Any) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text("- name: research\n  nominal: {trn3-gen2: 144}\n  cohort: lab\n"
                      "  defaultFor: [team-a]\n- name: serving\n  nominal: {trn3-gen2: 144}\n"
                      "  cohort: lab\n  defaultFor: [team-b]\n")
    with served(tmp_path, "--cluster", cluster_file(tmp_path), "--queues", str(queues),
                *FAST) as url, offline_page(browser, "dashboard-fair") as (page, offline, errors):
        page.goto(f"{url}/?poll=0.5")
        research = page.locator('#queues tr[data-queue="research"]')
        until(lambda: research.count() == 1, "the research queue's row")
        submit(url, "team-a", "one", 143, level="ultraserver")
        submit(url, "team-a", "two", 144, level="ultraserver")

        def shown(name: str) -> list[str]:
            return page.locator(f'#queues tr[data-queue="{name}"] td').all_inner_texts()

        def api_status(name: str) -> dict[str, Any]:
            got: dict[str, Any] = httpx.get(f"{url}/v1/tenantqueues/{name}",
                                            timeout=10).json()["status"]
            return got

        until(lambda: shown("research")[3] == "287", "research holding 287 chips")
        # serving now wants chips too: its fair share rises above the nothing it holds
        submit(url, "team-b", "wants", 100, level="ultraserver")
        until(lambda: api_status("serving").get("fairShareChips"), "serving's fair share")

        def agrees(name: str) -> bool:
            status = api_status(name)
            return shown(name)[2:7] == [str(status["nominalChips"]), str(status["usedChips"]),
                                        str(status["borrowedChips"]),
                                        str(status["pendingJobs"]),
                                        str(status.get("fairShareChips", "-"))]
        for name in ("research", "serving"):
            until(lambda n=name: agrees(n), f"{name}'s held chips and fair share as the API says")

        def marked() -> bool:
            fair = api_status("research").get("fairShareChips")
            label = research.locator(".bar").get_attribute("aria-label") or ""
            return fair is not None and label.endswith(f", fair share {fair}") and (
                research.locator(".bar .fair").get_attribute("title")
                == f"fair share: {fair} chips")
        until(marked, "research's fair share marked on its bar")
        assert offline.attempts == []
        assert not errors, errors


def test_kubernetes_mode_charts_the_load_the_operator_reports(tmp_path: Path, browser: Any,
                                                              kube_env: Any,
                                                              kube_namespace: str) -> None:
    """On the real API server tier the operator writes status.load (here with kubectl): the
    chart draws the offered load and p99 TTFT, and follows a new replica count."""
    env = {"KUBECONFIG": str(kube_env.kubeconfig),
           "ULTRAPLANE_KUBECONFIG": str(kube_env.kubeconfig)}

    def status(replicas: int, rps: float, ttft: float) -> None:
        kube_env.kubectl("patch", "-n", kube_namespace, "inferencejob", "chat",
                         "--subresource=status", "--type=merge", "-p", json.dumps({"status": {
                             "phase": "Running", "replicas": replicas, "readyReplicas": replicas,
                             "desiredReplicas": replicas,
                             "load": {"requestsPerSecond": rps, "ttftP99Ms": ttft}}}))

    with served(tmp_path, "--backend", "kubernetes", "--tick-seconds", "0.5", env=env) as url, \
            offline_page(browser, "dashboard-kubernetes-services") as (page, offline, errors):
        body = {"metadata": {"name": "chat"},
                "spec": {"replicas": 2, "chipsPerReplica": 4, "model": {"name": "llama"},
                         "load": {"requestsPerSecond": 20},
                         "latencySLO": {"timeToFirstTokenMs": 900}}}
        answer = httpx.post(f"{url}/v1/namespaces/{kube_namespace}/inferencejobs", json=body,
                            timeout=10)
        assert answer.status_code == 201, answer.text
        status(2, 150.0, 420.0)
        page.goto(f"{url}/?poll=0.5")
        card = page.locator(f'[data-service="ij/{kube_namespace}/chat"]')
        until(lambda: card.count() == 1, "chat's chart")
        load = card.locator('[data-chart="load"] [data-series="load"]')
        ttft = card.locator('[data-chart="ttft"] [data-series="ttft"]')
        until(lambda: load.count() == 1 and load.get_attribute("data-last") == "150",
              "the offered load drawn")
        assert ttft.get_attribute("data-last") == "420"
        status(4, 390.0, 980.0)  # over its objective: the operator adds replicas
        until(lambda: card.locator('[data-series="ready"]').get_attribute("data-last") == "4",
              "the ready line at 4")
        until(lambda: load.get_attribute("data-last") == "390", "the load line at 390")
        assert ttft.get_attribute("data-last") == "980"
        objective = card.locator('[data-chart="ttft"] [data-series="objective"]')
        # SVG y grows downwards: the last TTFT point is above the objective line
        last_y = float(ttft.get_attribute("points").split()[-1].split(",")[1])
        assert last_y < float(objective.get_attribute("y1"))
        assert "390 req/s" in card.locator(".facts").inner_text()
        assert offline.attempts == []
        assert not errors, errors
