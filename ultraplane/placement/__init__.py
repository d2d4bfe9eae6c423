"""Placement: where one gang goes.

The allocator holds the usage of a topology (`slots`) and places gangs all-or-nothing with the
pure `searches`; `placements` are its inputs and outputs, `capacities` what is left, and
`preemption` the fewest victims that make one domain fit. It knows chips and requests, not
queues, quotas or power.
"""
