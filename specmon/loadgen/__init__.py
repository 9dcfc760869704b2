"""The load generator: runs in its own process (`python -m specmon.loadgen`, started by
orchestration.measure.sweep) with its own event loop, so the client's timing is not the monitor's.

    protocol  every line between specmon and its generator processes   runner    the sweep loop over levels
    level     one level: closed loop or open loop                      client    one streaming request (SSE)
    workload  what is sent: prompts and pre-encoded request bodies     wakeup    waking on time for open loops
    shards    one sweep over several generator processes (--processes) lines     whole JSON lines appended"""
