"""The built-in demo model: a toy agent trained here, on synthetic data, in minutes.

What it is for: giving a newcomer's `make serve` a checkpoint that behaves like
an agent -- it thinks, calls one of four tools (calculate, get_weather,
convert_units, get_time), reads the result and answers -- so the server's
agent features (tool-call anchors, reasoning budgets, windowed layers) have
something real to run on without downloading a model.

What it is not for: anything beyond those four tools. See MODEL_CARD.md.

Layout: tools.py / units.py (the tools, executed for real), corpus*.py (the
synthetic conversations and the held-out split), render.py (the chat
template and training masks), tokenizer_build.py, train.py,
evaluate_offline.py.
"""
