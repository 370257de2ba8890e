"""``slowdown report``: one self-contained HTML file (and, on request, PNG images) per range.

``data`` computes what every figure shows from the store, ``page`` writes the HTML with the
figures' data embedded and drawn by inline script, ``png`` draws the same data with
matplotlib, ``provision`` estimates the nodes a target aggregate needs. The command is
``slowdown.analysis.cli.report``; nothing here is imported until it runs.
"""
