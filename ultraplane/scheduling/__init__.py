"""The scheduling cycle: the queue of waiting jobs and the driver that admits them.

`scheduler` runs one cycle over the queue (order, placement, split pricing, reservation and
backfill, preemption, replicas) with the policies of `ultraplane.policies`; `admissions` is the
one entry point every adapter calls with a trigger, and `decisions` what it answers.
"""
