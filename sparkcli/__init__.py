"""placeholder: the CLI moves here (issue 18)."""
