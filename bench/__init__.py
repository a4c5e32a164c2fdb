"""The benchmark: stdbmod's durable job lifecycle side by side with the peer queues.

Run `python bench/run.py` (full) or `python bench/run.py --quick` (seconds, CI)."""
