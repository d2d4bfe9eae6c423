"""The scheduling cycle: the queue of waiting jobs and the driver that admits them.

`scheduler` is the driver: one cycle over the queue, asking the cycle's policies in a fixed
order (its docstring gives the order and a job's path through it). Each policy is a module
of its own: `quotagates` and `powergates` (the books of `ultraplane.policies` in the cycle),
`replicas` (all parts or none), `evictions` (preemption), `splits` (split pricing),
`reservations` and `backfills` (EASY), `carryovers` (deep queues); they share `rosters` (the
jobs) and `cycles` (the cycle's state and result). `admissions` is the one entry point every
adapter calls with a trigger, and `decisions` what it answers.
"""
