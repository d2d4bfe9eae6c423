"""`python -m ultraplane.operator` runs the operator like `ultraplane operator`."""

from ultraplane.operator.cli import operator

operator(prog_name="ultraplane operator")
