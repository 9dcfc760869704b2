"""What a sweep sends and aims for: open-loop arrival schedules (arrivals), prompt sets (datasets) and goodput
objectives (goodput)."""
