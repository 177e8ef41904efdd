"""`python -m spanbudget`: the same as the `spanbudget` command."""

from spanbudget.cli import main

main()
