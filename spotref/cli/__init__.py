"""The spotref command line: the dispatcher (``main``), generate / audit, the demo, and what every
command shares (option types, typed options, tables and progress bars)."""
