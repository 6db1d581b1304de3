"""What the workflow asks of the library: the config read against its schema, the runs table, the code a script reaches, disk use, failpoints. Never imports torch."""
