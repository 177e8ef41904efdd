"""The `spanbudget` command: the CLI's root over both sides' commands (`cli`), and the
demo (`demo`) with the embedded stack it starts as child processes (`stack`,
`processes`). The top floor: it imports the reference path and the collector, and
nothing imports it."""
