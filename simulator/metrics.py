"""Prometheus metrics of cluster mode: fleet and UltraServer power, utilisation, energy, jobs.

Why a private registry: the API and the operator may run in the same process
in tests; a registry per simulator keeps metric names from colliding and lets
tests read values without scraping HTTP.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge
from ultraplane.simulator.kubelets import VirtualKubelet


class SimulatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.fleet_power = Gauge("ultraplane_sim_fleet_power_watts", "Fleet power draw (W).", registry=r)
        self.fleet_util = Gauge("ultraplane_sim_fleet_utilization", "Mean chip utilisation, 0..1.", registry=r)
        self.fleet_energy = Gauge("ultraplane_sim_fleet_energy_kwh", "Fleet energy since start (kWh).", registry=r)
        self.us_power = Gauge("ultraplane_sim_ultraserver_power_watts", "UltraServer power (W).",
                              ["ultraserver"], registry=r)
        self.us_util = Gauge("ultraplane_sim_ultraserver_utilization", "UltraServer utilisation, 0..1.",
                             ["ultraserver"], registry=r)
        self.jobs_running = Gauge("ultraplane_sim_jobs_running", "Jobs the simulator runs.", registry=r)
        self.job_progress = Gauge("ultraplane_sim_job_progress_percent", "Job progress (%).",
                                  ["namespace", "name"], registry=r)
        self.job_power = Gauge("ultraplane_sim_job_power_watts", "Job power draw (W).",
                               ["namespace", "name"], registry=r)
        self.events = Counter("ultraplane_sim_job_events", "Job events (Succeeded, ChipFailed).",
                              ["kind"], registry=r)
        self.heartbeats = Counter("ultraplane_sim_heartbeats", "Status write rounds.", registry=r)
        self._seen_events: dict[str, int] = {}
        self._labels: set[tuple[str, str]] = set()

    def update(self, kubelet: VirtualKubelet) -> None:
        fleet = kubelet.runtime.fleet()
        self.fleet_power.set(fleet.power_watts)
        self.fleet_util.set(fleet.utilization)
        self.fleet_energy.set(fleet.energy_kwh)
        for name, (util, watts) in fleet.per_ultraserver.items():
            self.us_power.labels(name).set(watts)
            self.us_util.labels(name).set(util)
        running = 0
        labels: set[tuple[str, str]] = set()
        for key, t in kubelet.jobs.items():
            s = kubelet.runtime.status(key)
            running += s.phase == "Running"
            labels.add((t.namespace, t.name))
            self.job_progress.labels(t.namespace, t.name).set(s.progress_percent)
            self.job_power.labels(t.namespace, t.name).set(s.power_watts)
        for gone in self._labels - labels:
            self.job_progress.remove(*gone)
            self.job_power.remove(*gone)
        self._labels = labels
        self.jobs_running.set(running)
        for kind, n in kubelet.events_total.items():
            new = n - self._seen_events.get(kind, 0)
            if new > 0:
                self.events.labels(kind).inc(new)
            self._seen_events[kind] = n
        self.heartbeats.inc()
