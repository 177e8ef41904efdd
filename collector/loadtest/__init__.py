"""Load tests whose every request is a traced request, joined with its budget verdict."""
