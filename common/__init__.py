"""What both sides share, and nothing else of spanbudget's: the root of its exceptions
(`errors`), the span and attribute names of the semantic conventions and of vLLM
(`semconv`), a process's tracer provider (`tracing`), HTTP serving with its timeouts
(`serving`), an HTTP client transport (`connections`), console output (`terminal`), the
commands' shared options (`commands`), which extras are installed (`extras`) and the
files the package ships (`shipped`)."""
