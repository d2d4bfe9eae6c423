"""What every `ultraplane` command line shares: the logging flag, click parameter types, and
the core's own commands (`place`, `profiles`)."""
