"""Framework adapters: ASGI (and FastAPI), Flask, Django; and a ``limits`` storage."""
