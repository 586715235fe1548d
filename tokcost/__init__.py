"""tokcost: roofline cost model for LLM inference, and a decode loop that checks it."""

__version__ = "0.1.0"
