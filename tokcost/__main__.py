"""`python -m tokcost` runs the CLI."""

from tokcost.cli.launch import run

if __name__ == "__main__":  # a worker process started by import (plan's search, where fork is not the start) runs none
    run()
