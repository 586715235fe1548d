"""`python -m tokcost` runs the CLI."""

from tokcost.cli.launch import run

run()
