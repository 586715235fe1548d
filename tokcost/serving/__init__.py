"""Serving and planning: continuous batching with chunked prefill, priced from the engine's own roofline parts."""
