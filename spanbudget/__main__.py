"""`python -m spanbudget`: the same as the `spanbudget` command."""

from spanbudget.app.cli import main

main()
