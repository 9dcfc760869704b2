"""The Textual app, a front end: the only layer that imports Textual.

    app       the App: panes, keys, screens; asks the engine through its Engine protocol
    bridge    EngineBridge, that protocol over a RunManager and the sweep runner: views and log lines as Messages
    state     what the screen shows as plain data and the rules that change it (tested without Textual)
    messages  the engine's updates as Textual Messages      rows     frozen presentation rows per pane
    servers   the Servers pane (one card per profile)        logview  the Log pane
    gpuenv    the GPU / environment pane                     sweep    the Sweep pane (chart and level table)
    plot      a sweep chart (plotext; also `specmon compare`) format   numbers, durations and labels
    forms     modal screens: confirm, sweep form, pickers    palette  the command palette
    footer    key hints that fit the width                   help     the help screen
    keys      the key bindings (from model.config.keymap)    themes   themes/*.toml as Textual themes
    throttle  coalesced repaints                             heap     the garbage collector, settled after start-up"""
