"""The run's settings and its energy, said in sentences for the report.

Why: summary.json keeps the settings as keys for programs (`checkpoint_interval_s:
600.0`, `reservation: true`); a person reading report.html wants "training
jobs checkpoint every 10 minutes". Every sentence is built from the same meta
dict that summary.json holds, so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FAILURE_POLICIES = {
    "RestartAll": "a job hit by a failure restarts whole from its last checkpoint",
    "ReplaceAffected": "a job hit by a failure gets replacement chips for the failed ones only "
                       "and resumes from its last checkpoint",
    "Fail": "a job hit by a failure fails and is not retried",
}


def duration(seconds: float) -> str:
    """600 -> '10 minutes', 5400 -> '1.5 hours'."""
    if seconds < 120:
        return f"{seconds:g} seconds"
    if seconds < 7200:
        return f"{seconds / 60:g} minutes"
    return f"{seconds / 3600:.3g} hours"


def settings_in_words(meta: Mapping[str, Any]) -> list[str]:
    """One sentence per setting of the run, in the order a reader needs them."""
    out: list[str] = []
    chips = meta.get("fleet_chips")
    servers = meta.get("ultraservers")
    fleet = f"Fleet {meta.get('fleet', '?')}"
    if servers is not None and chips is not None:
        fleet += f": {servers:,} UltraServer{'s' if servers != 1 else ''}, {chips:,} Trainium chips"
    out.append(fleet + ".")
    jobs = meta.get("jobs_in_trace")
    bad = meta.get("bad_rows") or []
    trace = f"Trace {meta.get('trace', '?')}"
    if jobs is not None:
        trace += f": {jobs:,} jobs replayed"
    trace += f", {len(bad)} bad row(s) skipped (listed in summary.json)." if bad else "."
    out.append(trace)
    policies = meta.get("policies") or []
    if policies:
        out.append("Placement policies compared: " + ", ".join(policies) + ". ultraplane places "
                   "each gang at the tightest level it fits (best fit, fewest UltraServers); "
                   "first-fit takes the first free chips, in id order, of the first domain "
                   "with room.")
    per = meta.get("chips_per_gpu", 1)
    out.append(f"Each GPU of the trace became {per} Trainium chip{'s' if per != 1 else ''}.")
    if meta.get("queue_order"):
        out.append(f"Queue order: {meta['queue_order']}.")
    out.append("Backfill reservation on: the first waiting gang of whole UltraServers reserves "
               "the ones that free up soonest, and smaller jobs start there only if predicted "
               "to end first." if meta.get("reservation", True) else
               "Backfill reservation off: plain best-effort first-in first-out.")
    if meta.get("large_job_threshold"):
        text = str(meta["large_job_threshold"])
        out.append(text[:1].upper() + text[1:] + ".")
    if "checkpoint_interval_s" in meta:
        out.append(f"Training jobs checkpoint every {duration(float(meta['checkpoint_interval_s']))}"
                   "; a restart resumes from the last checkpoint.")
    out.append(_failures(meta))
    if meta.get("held_allocations"):
        out.append(f"The cluster file's {meta['held_allocations']} existing allocation(s) keep "
                   "their chips busy for the whole run.")
    if meta.get("idle_power_kw") is not None and meta.get("peak_power_kw_all_busy") is not None:
        out.append(f"Power model: the fleet draws {meta['idle_power_kw']:,.0f} kW with every chip "
                   f"idle and {meta['peak_power_kw_all_busy']:,.0f} kW with every chip at peak.")
    if "seed" in meta:
        out.append(f"Random seed {meta['seed']}: the same seed and inputs give the same report.")
    out.append("All times are simulated: seconds on the trace's own clock (its submission "
               "times), never wall-clock time; the plots count from the first submission.")
    return out


def _failures(meta: Mapping[str, Any]) -> str:
    chip = float(meta.get("chip_failure_rate_per_hour") or 0)
    server = float(meta.get("server_failure_rate_per_hour") or 0)
    scripted = meta.get("scripted_failures") or []
    parts = []
    if chip:
        parts.append(f"{chip:g} random chip failures per chip-hour")
    if server:
        parts.append(f"{server:g} random server failures per server-hour")
    if scripted:
        parts.append("scripted failures at " + "; ".join(scripted))
    if not parts:
        return "No failures were injected."
    policy = FAILURE_POLICIES.get(str(meta.get("failure_policy")), str(meta.get("failure_policy")))
    repair = meta.get("repair_s")
    fixed = f"; a failed part is repaired after {duration(float(repair))}" if repair else ""
    return f"Failures: {', '.join(parts)}; {policy}{fixed}."


def energy_in_words(s: Mapping[str, Any]) -> str:
    """Where one policy's energy went: the idle floor against the extra of busy chips."""
    total = s.get("energy_kwh")
    idle, busy, share = s.get("energy_idle_kwh"), s.get("energy_busy_kwh"), s.get("energy_idle_share")
    if total is None or idle is None or busy is None or share is None:
        return "No energy was accounted."
    text = (f"{total / 1000:,.2f} MWh in all: {idle / 1000:,.2f} MWh ({share:.0%}) was idle draw, "
            f"the floor every chip draws whether or not it runs a job, and {busy / 1000:,.2f} MWh "
            f"({1 - share:.0%}) busy draw, the extra power of chips running jobs.")
    unallocated = s.get("energy_idle_unallocated_kwh")
    if unallocated is not None and total > 0:
        text += (f" Chips that held no job drew {unallocated / 1000:,.2f} MWh of the idle draw "
                 f"({unallocated / total:.0%} of all energy).")
    return text
