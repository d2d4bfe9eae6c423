"""Turning a job's run into accounting figures: chip-hours, energy, completion time.

Both backends call `usage_of` with what they know (timestamps, chips, energy
so far) and store the result with `store.upsert_accounting`. Values are
absolute, never increments, so a tick that runs twice or a restart that
replays a job cannot double-count.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ultraplane.api.store.tables import AccountingCreate

DAY_S = 86_400.0


def day_of(t_s: float) -> str:
    return datetime.fromtimestamp(t_s, tz=UTC).strftime("%Y-%m-%d")


def split_by_day(
    start_s: float, end_s: float, *, chips: int, energy_kwh: float
) -> dict[str, tuple[float, float]]:
    """Split a run over UTC days: chip-hours exactly, energy in proportion to time.

    Energy is apportioned by time because the simulator reports one running
    total per job; a job's power is close to flat between checkpoints, so the
    error is small and the day totals always add up to the job total.
    """
    if end_s <= start_s:
        return {day_of(start_s): (0.0, energy_kwh)} if energy_kwh else {}
    span = end_s - start_s
    out: dict[str, tuple[float, float]] = {}
    cursor = start_s
    while cursor < end_s:
        day_start = datetime.fromtimestamp(cursor, tz=UTC).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        next_day = (day_start + timedelta(days=1)).timestamp()
        stop = min(next_day, end_s)
        seconds = stop - cursor
        out[day_of(cursor)] = (chips * seconds / 3600.0, energy_kwh * seconds / span)
        cursor = stop
    return out


def usage_of(
    *,
    job_uid: str,
    kind: str,
    namespace: str,
    name: str,
    chips: int,
    phase: str,
    submitted_s: float | None,
    started_s: float | None,
    finished_s: float | None,
    now_s: float,
    energy_kwh: float,
    chip_hours: float | None = None,
    queue: str | None = None,
) -> tuple[AccountingCreate, dict[str, tuple[float, float]]]:
    """The accounting row of one job and its per-day split, as of `now_s`.

    `chip_hours`, when the job's status reports it (`status.chipHours`, written on the clock
    that `energy_kwh` uses: simulated time under the simulator), is the total; the timestamps
    only apportion it over days, as they apportion the energy. Without it, chip-hours come
    from the timestamps.
    """
    end_s = finished_s if finished_s is not None else now_s
    days: dict[str, tuple[float, float]] = {}
    total = 0.0
    if started_s is not None:
        days = split_by_day(started_s, max(end_s, started_s), chips=chips, energy_kwh=energy_kwh)
        total = sum(hours for hours, _ in days.values())
    if chip_hours is not None:
        if total > 0:
            days = {d: (h * chip_hours / total, e) for d, (h, e) in days.items()}
        elif chip_hours > 0:
            day = day_of(started_s if started_s is not None else now_s)
            days = {day: (chip_hours, days.get(day, (0.0, energy_kwh))[1])}
        total = chip_hours
    chip_hours = total
    completion = None
    if finished_s is not None and submitted_s is not None:
        completion = max(0.0, finished_s - submitted_s)
    record = AccountingCreate(
        job_uid=job_uid,
        kind=kind,
        namespace=namespace,
        name=name,
        queue=queue,
        chips=chips,
        phase=phase,
        submitted_s=submitted_s,
        started_s=started_s,
        finished_s=finished_s,
        chip_hours=chip_hours,
        energy_kwh=energy_kwh,
        completion_time_s=completion,
    )
    return record, days
