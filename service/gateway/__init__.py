"""The RAG gateway: an OpenAI-compatible FastAPI app with auth, rate limits and stage spans."""
