"""`python -m haldet` = the `haldet` command."""

from haldet.cli import entry

entry()
