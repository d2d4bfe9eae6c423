"""Serving: what one inference replica delivers for a request load, and how many to run.

`llms` names the models (architecture figures), `replicas` prices one engine step on a
profile's chips, `mixes` summarises a window of traffic, `estimates` is the closed-form model
of one replica under a load (queueing, TTFT, TPOT, draw), `planners` decides replicas and a
power cap from what a cluster observes, `baselines` are the static-peak and HPA policies the
replay compares with, and `engines` is the request-level reference the tests check the
closed form against. Pure: it reads the hardware profiles and nothing above them.
"""
