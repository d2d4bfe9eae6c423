"""Job documents: the one reading of a job's spec and the one building of its status.

Custom resource bodies and REST specs become core objects here (`conversions`, `jobspecs`),
decisions become status documents (`jobstatuses`), and a pending job's status says why it waits
(`explanations`).
"""
