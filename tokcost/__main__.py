"""`python -m tokcost` runs the CLI."""

from tokcost.cli.app import run

run()
