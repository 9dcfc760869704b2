"""The run lifecycle: launching, watching, stopping, reconciling and adopting runs, on one host, on several
(multi-node) or as Slurm jobs, and the state kept about them.

    manager     RunManager, the one door front ends use (its verbs), and NodeRooms, the rooms as multinode and
                slurmjobs use them (the NodeRuns protocol)
    index       RunIndex: the runs known here, by profiles file (KnownRuns: what front ends read of it)
    store       RunStore: the state files                         view     RunView, LogLine, StopReport
    connections HostPool: one connection (HostOps) per host       bulk     stop/restart over a scope of runs
    launcher    preflight, launch locks, the start of a run       stopper  the stop verb and its recorded verdict
    terminate   ending a run's processes (signals, sweep, gates)  ready    waiting until a launch is ready
    watcher     RunWatcher: watches one run                       watching WatchedRuns: every watched run (it
                                                                           alone changes the table of watchers)
    reconciler  Reconciler: unwatched runs' records vs their host; `replay` and `process_ended` over one host
    adoption    runs found on a host, taken in
    multinode   runs made of one run per node                     slurmjobs runs that are Slurm jobs

The verdicts a run reaches are described once, in `model.runs.runstatus`."""
